"""The claims of the ``lm-shift`` experiment, read from its summary.

Each claim checks a statement of "Rethinking Activation Functions" (§4.3 and Fig. 7(c) for
GPT-2 Small, §2.2 and §5 for the early lead, §4.1 and Fig. 7(a) for the overshoot, which the
paper shows for ViT-Base; App. E.2 for overshoots in language models) on a small GPT; every
check is a sign or an ordering, so no tolerance of ours enters.

Over seeds every claim is paired (the default): the shifted and unshifted models of a seed
start from the same initial weights and see the same batches, so each claim's sample is the
per-seed residual (shifted − unshifted). None is deterministic: all compare trained models.
"""

from __future__ import annotations

from actlab.runner.claims import ClaimSpec, claim_id, gt, judge_all, lt
from actlab.runner.experiment import Claim

NAME = "lm-shift"


def claims(summary: dict) -> list[Claim]:
    """Shift lowers the final loss; early lead of the unshifted model; smaller overshoot."""
    specs = []
    for act, s in summary["per_activation"].items():
        n = {"act": act, "gpt2_gain": 0.01,  # §4.3: GPT-2 Small's loss falls "by about 0.01"
             "residual": s["residual_final"],
             "sd": s["residual_final_sd"], "better": s["seeds_shift_better"],
             "n_seeds": s["n_seeds"], "early": s["residual_early"], "early_step": s["early_step"],
             "over_unshifted": s["overshoot_unshifted"], "over_shifted": s["overshoot_shifted"]}
        specs += [
            ClaimSpec(
                id=claim_id(NAME, act, "shift-lowers-final-loss"),
                text="{act}: adaptive shifting lowers the final validation loss "
                     "(GPT-2 Small: by about {gpt2_gain:g})",
                measured="residual {residual:+.4f} (sd over seeds {sd:.4f}; "
                         "{better}/{n_seeds} seeds better)",
                check=lt(n["residual"], 0.0), source="rethinking", where="§4.3, Fig. 7(c)",
                numbers=n, quoted=("gpt2_gain",)),
            ClaimSpec(
                id=claim_id(NAME, act, "unshifted-leads-early"),
                text="{act}: the unshifted model leads early (as the controlled model does, "
                     "§2.2; §5 notes that GPT-2 Small did not show this)",
                measured="early residual {early:+.4f} at step {early_step}",
                check=gt(n["early"], 0.0), source="rethinking", where="§2.2, §5", numbers=n),
            ClaimSpec(
                id=claim_id(NAME, act, "shift-suppresses-overshoot"),
                text="{act}: shifting suppresses the hidden-state overshoot (the paper shows it "
                     "for ViT-Base, §4.1, Fig. 7(a); App. E.2 finds overshoots in public "
                     "language-model checkpoints, which it does not shift)",
                measured="overshoot {over_shifted:.4f} shifted vs {over_unshifted:.4f} "
                         "unshifted (mean over blocks, seeds)",
                check=lt(n["over_shifted"], n["over_unshifted"]), source="rethinking",
                where="§4.1, Fig. 7(a); App. E.2", numbers=n),
        ]
    return judge_all(specs)
