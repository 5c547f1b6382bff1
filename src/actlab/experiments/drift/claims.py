"""The claims of the ``drift`` experiment, read from its summary ("Bug or Feature²" §2-4,
App. A-C); two are our own checks (PyTorch's default init, the two activations the
released code trained as ReLU).

Over seeds: no claim is deterministic (trained, randomly initialised networks). Every
comparison is paired (a seed gives every activation, optimizer and learning rate the same
initial weights and batch order) except PyTorch's default init against He init, whose two
arms start from different weights (unpaired, Welch).
"""

from __future__ import annotations

import numpy as np

from actlab.analysis import layer_number
from actlab.experiments.drift.summary import parse_sweep_item
from actlab.runner.claims import ClaimSpec, all_of, claim_id, gt, judge_all, lt
from actlab.runner.experiment import Claim
from actlab.train.optim import OPTIMIZERS

NAME = "drift"
POSITIVE = ("relu", "gelu", "silu", "noisy_relu", "sugar")  # positively biased activations
PAPER = "bug-or-feature"


def claims(summary: dict) -> list[Claim]:
    """Drift sign per activation, tanh, gradient sign, sparsity, NoisyReLU/SUGAR vs ReLU."""
    acts = summary.get("activations", {})
    specs = [_drift_negative(act, acts[act]) for act in POSITIVE
             if acts.get(act) and "mean_shift_later_layers" in acts[act]]
    positive_shifts = [abs(acts[act]["mean_shift_later_layers"]) for act in POSITIVE
                       if acts.get(act) and acts[act].get("mean_shift_later_layers") is not None]
    tanh = acts.get("tanh")
    if tanh and positive_shifts and "mean_shift_later_layers" in tanh:
        specs.append(_tanh_no_drift(tanh["mean_shift_later_layers"],
                                    float(np.median(positive_shifts))))
    specs += [_positive_gradient(act, acts[act]) for act in ("relu", "gelu", "silu")
              if acts.get(act) and acts[act].get("preact_grad_mean_init") is not None]
    relu = acts.get("relu")
    if relu:
        specs += _relu_conditions(relu)
    for act in ("noisy_relu", "sugar"):
        e = acts.get(act)
        if e and e.get("loss_gap_vs_relu") is not None:
            n = {"gap": e["loss_gap_vs_relu"], "min_gap": 1e-3}
            specs.append(ClaimSpec(
                id=claim_id(NAME, act, "trains-differently-from-relu"),
                text=f"{act} trains differently from ReLU (paired seeds: relative mean loss "
                     "gap > {min_gap:g})",
                measured="gap {gap:.2e}", check=gt(n["gap"], n["min_gap"]), source="actlab",
                where="README of the specification documents (the released code trained both "
                      "as ReLU)", numbers=n))
    specs += _sweep_claims(summary.get("sweep", {}).get("relu", {}))
    return judge_all(specs)


def _drift_negative(act: str, e: dict) -> ClaimSpec:
    """Negative shift in every hidden layer >= 2 and (almost) none in layer 1."""
    per = e["mean_shift_per_layer"]
    hidden = [v for k, v in per.items() if 2 <= layer_number(k) <= len(per) - 1]
    first, later = e["mean_shift_first_layer"], e["mean_shift_later_layers"]
    n = {"first": first, "later": later, "ratio": 0.2}
    first_abs = None if first is None else abs(first)
    bound = None if later is None else n["ratio"] * abs(later)
    return ClaimSpec(
        id=claim_id(NAME, act, "drift-negative-in-hidden-layers"),
        text=f"{act}, random data: weights drift negative in every hidden layer >= 2, not in "
             "layer 1 (|shift1| < {ratio:g} |shift later|)",
        measured="shift layer1 {first:+.2e}, layers 2-6 {later:+.2e}",
        check=all_of(lt(later, 0.0), *(lt(v, 0.0) for v in hidden), lt(first_abs, bound)),
        source=PAPER, where="§3, Fig. 3(a); App. C.1", numbers=n)


def _tanh_no_drift(shift: float | None, median: float) -> ClaimSpec:
    """tanh's shift is small next to the positively biased activations'."""
    n = {"tanh": shift, "median": median, "ratio": 0.2}
    return ClaimSpec(
        id=claim_id(NAME, "tanh", "no-drift"),
        text="tanh, random data: no drift (|shift| < {ratio:g} x median |shift| of the "
             "positively biased activations)",
        measured="tanh {tanh:+.2e} vs {median:+.2e}",
        check=lt(None if shift is None else abs(shift), n["ratio"] * median),
        source=PAPER, where="App. C.2", numbers=n)


def _positive_gradient(act: str, e: dict) -> ClaimSpec:
    """Positive mean gradient at the pre-activations at init, small covariance term."""
    g, c = e["preact_grad_mean_init"], e.get("preact_grad_cov_init")
    n = {"grad": g, "cov": c, "ratio": 0.1}
    return ClaimSpec(
        id=claim_id(NAME, act, "positive-preact-gradient-at-init"),
        text=f"{act}: mean pre-activation gradient > 0 at init, covariance term < "
             "{ratio:g}x of it (hidden layers)",
        measured="grad mean {grad:+.2e}, cov {cov:+.2e}",
        check=all_of(gt(g, 0.0), lt(None if c is None else abs(c), n["ratio"] * g)),
        source=PAPER, where="§2, Theorem 2.2; §3; App. A.1, Fig. 3(b)", numbers=n)


def _relu_conditions(relu: dict) -> list[ClaimSpec]:
    """ReLU's sparsity, and its drift on digits, with PyTorch's default init and with skips."""
    specs = []
    for cond, label, where in (("main", "random data", "§4"),
                               ("digits", "digits", "App. B.1.3")):
        e = relu if cond == "main" else relu.get("digits")
        if e and e.get("sparsity_start") is not None and e.get("sparsity_end") is not None:
            n = {"start": e["sparsity_start"], "end": e["sparsity_end"], "margin": 0.02}
            specs.append(ClaimSpec(
                id=claim_id(NAME, "relu", cond, "sparsity-rises"),
                text=f"relu without norm, {label}: sparsity rises over training (by > "
                     "{margin:g})",
                measured="{start:.3f} -> {end:.3f}",
                check=gt(n["end"], n["start"] + n["margin"]), source=PAPER, where=where,
                numbers=n))
    dg = relu.get("digits")
    if dg and dg.get("mean_shift_later_layers") is not None:
        n = {"shift": dg["mean_shift_later_layers"]}
        specs.append(ClaimSpec(
            id=claim_id(NAME, "relu", "digits", "drift-negative"),
            text="relu on real data (digits, cross-entropy, Adam): weights of layers 2-6 drift "
                 "negative",
            measured="{shift:+.2e}", check=lt(n["shift"], 0.0), source=PAPER,
            where="App. B.1.3, App. D.2 (CIFAR-10)", numbers=n))
    di = relu.get("default-init")
    if (di and relu.get("mean_shift_later_layers") is not None
            and di["mean_shift_later_layers"] is not None):
        n = {"default": di["mean_shift_later_layers"], "he": relu["mean_shift_later_layers"],
             "ratio": 0.1}
        specs.append(ClaimSpec(
            id=claim_id(NAME, "relu", "default-init", "hides-drift"),
            text="relu: PyTorch's default Linear init hides the drift (|shift| < {ratio:g}x the "
                 "He-init shift)",
            measured="default {default:+.2e} vs He {he:+.2e}",
            check=lt(abs(n["default"]), n["ratio"] * abs(n["he"])), source="actlab",
            numbers=n, paired=False))  # two inits: the arms share no initial weights
    sk = relu.get("skip")
    if sk and sk["mean_shift_later_layers"] is not None:
        n = {"shift": sk["mean_shift_later_layers"]}
        specs.append(ClaimSpec(
            id=claim_id(NAME, "relu", "skip", "drift-negative"),
            text="relu with skip connections: drift still negative", measured="{shift:+.2e}",
            check=lt(n["shift"], 0.0), source=PAPER, where="App. A.3, App. B.1.3, Fig. 9",
            numbers=n))
    return specs


def _sweep_claims(sweep: dict) -> list[ClaimSpec]:
    """Momentum drifts faster than SGD at each lr; a higher lr drifts more, per optimizer.

    A setting whose seeds all diverged has no drift to compare: its claims are undecided.
    """
    by = {k: v.get("drift_z_final") for k, v in sweep.items()}
    settings = {k: parse_sweep_item(k) for k in by}
    specs = []
    for lr_key in sorted({f"{lr:g}" for _, lr in settings.values()}):
        names = (f"sgd:{lr_key}", f"momentum:{lr_key}")
        if not all(name in by for name in names):
            continue
        n = {"sgd": by[names[0]], "momentum": by[names[1]]}
        lost = _diverged_text(sweep, names) if None in n.values() else ""
        specs.append(ClaimSpec(
            id=claim_id(NAME, "relu", f"lr-{lr_key}", "momentum-drifts-faster"),
            text=f"relu, lr {lr_key}: momentum drifts faster than plain SGD",
            measured=lost or "drift Z {momentum:.3g} vs {sgd:.3g}",
            check=gt(n["momentum"], n["sgd"]), source=PAPER, where="§3, Fig. 2", numbers=n,
            undecided_because=lost))
    for opt in OPTIMIZERS:  # orders the learning-rate claims
        pairs = sorted((settings[k][1], v) for k, v in by.items()
                       if settings[k][0] == opt and v is not None)
        lost = [k for k, v in by.items() if settings[k][0] == opt and v is None]
        text = f"relu, {opt}: a higher learning rate gives larger drift"
        cid = claim_id(NAME, "relu", opt, "higher-lr-larger-drift")
        if lost and len(pairs) + len(lost) >= 2:
            reason = _diverged_text(sweep, lost)
            specs.append(ClaimSpec(id=cid, text=text, measured=reason, check=gt(None, 0.0),
                                   source=PAPER, where="§3, Fig. 2", undecided_because=reason))
        elif len(pairs) >= 2:
            # every step up in lr drifts more: the smallest step in drift Z is positive
            n = {f"z{i}": z for i, (_, z) in enumerate(pairs)}
            n["min_step"] = min(b[1] - a[1] for a, b in zip(pairs, pairs[1:]))
            specs.append(ClaimSpec(
                id=cid, text=text,
                measured=", ".join(f"lr {lr:g}: {{z{i}:.3g}}" for i, (lr, _) in enumerate(pairs)),
                check=gt(n["min_step"], 0.0), source=PAPER, where="§3, Fig. 2", numbers=n))
    return specs


def _diverged_text(sweep: dict, settings: tuple[str, ...] | list[str]) -> str:
    """Which sweep settings have no drift to compare because every seed diverged."""
    lost = [f"{k} ({sweep[k].get('diverged_seeds', '?')} seeds diverged)" for k in settings
            if sweep.get(k, {}).get("drift_z_final") is None]
    return "no finished run: " + ", ".join(lost)
