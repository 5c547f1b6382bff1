"""The claims of the ``dead-units`` experiment, read from its summary.

Every claim checks a statement of the handbook page "Activations and initialization",
"Dead ReLUs"; the published shares and costs are quoted from it, the tolerances are ours.

Three parts of those statements hold by construction and are tests
(``tests/test_dead_units.py``), not claims: a ReLU unit of the one hidden layer that is dead on
the whole training set gets zero gradient from every batch, so under plain SGD the dead share
never falls (more dead after 30 epochs than after 1); leaky ReLU's output is never exactly
zero, so it has no dead units to lose; and a unit silent on the whole set is silent on every
batch, so the one-batch estimate is never below the whole-set share (only a strictly larger
estimate, the handbook's "overstates", is claimed).
"""

from __future__ import annotations

from actlab.runner.claims import ClaimSpec, all_of, claim_id, gt, judge_all, lt, within
from actlab.runner.experiment import Claim

NAME = "dead-units"
WHERE = "Dead ReLUs"


def claims(summary: dict) -> list[Claim]:
    """Compare with the handbook's dead shares and costs (tolerances in each claim)."""
    epochs = summary["epochs"]
    last = f"dead_share_epoch{epochs}"
    shallow = summary["shallow"]
    # the runs in their fixed order (large rate, small rate, leaky), named by their rates
    big_run, small_run, leaky_run = list(shallow)
    big, small, leaky = (shallow[r]["mean"] for r in (big_run, small_run, leaky_run))
    deep = summary["deep"]["mean"]
    rate = {run: run.rsplit("-lr", 1)[1] for run in shallow}

    n = {"published1": 0.62, "published30": 0.74, "tol": 0.15, "epochs": epochs,
         "m1": big["dead_share_epoch1"], "m30": big[last]}
    specs = [ClaimSpec(
        id=claim_id(NAME, big_run, "dead-share-matches-handbook"),
        text=f"ReLU at lr {rate[big_run]} (the handbook's: 4.0) loses {{published1:.0%}} of its "
             "units in epoch 1 and "
             "{published30:.0%} after 30 (mean over seeds; tolerance {tol:.0%} each)",
        measured="{m1:.1%} and {m30:.1%} (after {epochs})",
        check=all_of(within(n["m1"], n["published1"], n["tol"]),
                     within(n["m30"], n["published30"], n["tol"])),
        source="handbook", where=WHERE, numbers=n, quoted=("published1", "published30"))]

    n = {"tol": 0.01, "m1": small["dead_share_epoch1"], "m30": small[last]}
    specs.append(ClaimSpec(
        id=claim_id(NAME, small_run, "loses-none"),
        text=f"ReLU at lr {rate[small_run]} (the handbook's: 0.5) loses none (below {{tol:.0%}})",
        measured="{m1:.1%} and {m30:.1%}",
        check=lt(max(n["m1"], n["m30"]), n["tol"]),
        source="handbook", where=WHERE, numbers=n))

    # "loses none" holds by construction (no exact zero: a test); the claim is the cost. The
    # share of leaky units with a non-positive net input on every point is shown, not judged.
    n = {"published_leaky": 0.3638, "published_relu": 0.4493,
         "inactive": leaky["inactive_share_last"], "leaky": leaky["final_cost"],
         "relu": big["final_cost"]}
    specs.append(ClaimSpec(
        id=claim_id(NAME, leaky_run, "loses-none-lower-cost"),
        text=f"leaky ReLU at lr {rate[leaky_run]} (the handbook's: 4.0; it loses none: its "
             "output is never exactly zero) reaches a lower cost than ReLU "
             "({published_leaky:.4f} against {published_relu:.4f})",
        measured="cost {leaky:.4f} against {relu:.4f} ({inactive:.1%} of the leaky units have a "
                 "non-positive net input on every point; the slope 0.01 still passes them "
                 "gradients)",
        check=lt(n["leaky"], n["relu"]),
        source="handbook", where=WHERE, numbers=n, quoted=("published_leaky", "published_relu")))

    n = {"published": 0.227, "tol": 0.10, "m": deep["dead_share"]}
    specs.append(ClaimSpec(
        id=claim_id(NAME, "deep", "fresh-stack-dead-share"),
        text="a fresh 20x32 He ReLU stack has {published:.1%} dead units on the 300 training "
             "points (mean over seeds; tolerance {tol:.0%})",
        measured="{m:.1%}",
        check=within(n["m"], n["published"], n["tol"]),
        source="handbook", where=WHERE, numbers=n, quoted=("published",)))

    n = {"published_batch": 0.44, "published_full": 0.41, "tol": 0.15,
         "batch": deep["last_layer_one_batch"], "full": deep["last_layer_full"]}
    specs.append(ClaimSpec(
        id=claim_id(NAME, "deep", "one-batch-overstates-dead-share"),
        text="last layer: one batch of 20 overstates the dead share ({published_batch:.0%} vs "
             "{published_full:.0%} on the whole set); tolerance {tol:.0%} on the whole set, "
             "batch estimate above the whole set's",
        measured="{batch:.1%} vs {full:.1%}",
        check=all_of(gt(n["batch"], n["full"]),
                     within(n["full"], n["published_full"], n["tol"])),
        source="handbook", where=WHERE, numbers=n, quoted=("published_batch", "published_full")))
    return judge_all(specs)
