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
from actlab.runner.claims import (
    ClaimSpec,
    all_of,
    claim_id,
    gt,
    judge_all,
    le,
    lt,
    within,
)
from actlab.runner.experiment import Claim
from actlab.train.optim import OPTIMIZERS

NAME = "drift"
POSITIVE = ("relu", "gelu", "silu", "noisy_relu", "sugar")  # positively biased activations
PAPER = "bug-or-feature"
SHORT = "bug-or-feature-short"
# the short version has no numbered sections: its random-data paragraph, by its figure
SHORT_RANDOM = "random-data paragraph (\"Drift is intrinsic to optimization\"), Fig. 4"
FIG9 = "App. B.1.3, Fig. 9"


def claims(summary: dict) -> list[Claim]:
    """Drift sign per activation, tanh, gradient sign, sparsity, NoisyReLU/SUGAR vs ReLU."""
    acts = summary.get("activations", {})
    relu = acts.get("relu")
    # the real-data drift under both initialisations comes first (the paper states none)
    specs = _real_data_claims(relu) if relu else []
    specs += [_drift_negative(act, acts[act]) for act in POSITIVE
             if acts.get(act) and "mean_shift_later_layers" in acts[act]]
    positive_shifts = [abs(acts[act]["mean_shift_later_layers"]) for act in POSITIVE
                       if acts.get(act) and acts[act].get("mean_shift_later_layers") is not None]
    tanh = acts.get("tanh")
    if tanh and positive_shifts and "mean_shift_later_layers" in tanh:
        specs.append(_tanh_no_drift(tanh["mean_shift_later_layers"],
                                    float(np.median(positive_shifts))))
    specs += [_positive_gradient(act, acts[act]) for act in ("relu", "gelu", "silu")
              if acts.get(act) and acts[act].get("preact_grad_mean_init") is not None]
    if relu:
        specs += _relu_conditions(relu)
        specs += _depth_order(relu)
        specs += _fig9(relu)
    specs += _weaker_than_relu(acts)
    specs += _transients(acts)
    specs += _noisy_relu_drifts_most(acts)
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
    specs = _sparsity_rises(relu, "main", "random data", "§4")
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


def _real_data_claims(relu: dict) -> list[ClaimSpec]:
    """ReLU on real data: drift negative and sparsity rising, under He init and under
    PyTorch's default init (the document states no initialisation)."""
    specs = []
    for cond, init in (("digits", "He init"), ("digits-default-init", "PyTorch's default init")):
        e = relu.get(cond)
        if not e:
            continue
        if e.get("mean_shift_later_layers") is not None:
            n = {"shift": e["mean_shift_later_layers"]}
            specs.append(ClaimSpec(
                id=claim_id(NAME, "relu", cond, "drift-negative"),
                text=f"relu on real data (digits, cross-entropy, Adam), {init}: weights of the "
                     "hidden layers 2.. drift negative",
                measured="{shift:+.2e}", check=lt(n["shift"], 0.0), source=PAPER,
                where="App. B.1.3, App. D.2 (CIFAR-10)", numbers=n))
        specs += _sparsity_rises(e, cond, f"real data, {init}", "App. B.1.3")
    return specs


def _sparsity_rises(e: dict, cond: str, label: str, where: str) -> list[ClaimSpec]:
    """ReLU's sparsity rises over training by more than 0.02 (ours) in condition ``cond``."""
    if e.get("sparsity_start") is None or e.get("sparsity_end") is None:
        return []
    n = {"start": e["sparsity_start"], "end": e["sparsity_end"], "margin": 0.02}
    return [ClaimSpec(
        id=claim_id(NAME, "relu", cond, "sparsity-rises"),
        text=f"relu without norm, {label}: sparsity rises over training (by > {{margin:g}})",
        measured="{start:.3f} -> {end:.3f}",
        check=gt(n["end"], n["start"] + n["margin"]), source=PAPER, where=where, numbers=n)]


def _hidden_shifts(e: dict) -> list[tuple[int, float]]:
    """``(layer, shift)`` of the hidden layers 2 .. last hidden (not the input, not the head)."""
    per = e.get("mean_shift_per_layer") or {}
    return [(layer_number(k), v) for k, v in per.items()
            if 2 <= layer_number(k) <= len(per) - 1 and v is not None]


def _depth_order(relu: dict) -> list[ClaimSpec]:
    """The two versions' depth orders of ReLU's drift on random data; at most one can hold.

    The measure is the least-squares slope of the weight-mean shift over the hidden layers'
    index: > 0 when earlier layers end more negative (the long version), < 0 when deeper
    layers do (the short version).
    """
    shifts = _hidden_shifts(relu)
    if len(shifts) < 2:
        return []
    layers, values = zip(*shifts)
    slope = float(np.polyfit(np.asarray(layers, float), np.asarray(values, float), 1)[0])
    n = {"slope": slope}
    measured = "slope of the shift over layers 2..{last}: {slope:+.2e} per layer"
    n["last"] = max(layers)
    return [
        ClaimSpec(id=claim_id(NAME, "relu", "depth-order", "earlier-layers-more-negative"),
                  text="relu, random data: earlier layers accumulate more negative weights "
                       "(the shift rises with depth)",
                  measured=measured, check=gt(slope, 0.0), source=PAPER, where="§3, Fig. 3(a)",
                  numbers=n),
        ClaimSpec(id=claim_id(NAME, "relu", "depth-order", "deeper-layers-more-negative"),
                  text="relu, random data: deeper layers accumulate more negative weight means "
                       "(the shift falls with depth)",
                  measured=measured, check=lt(slope, 0.0), source=SHORT, where=SHORT_RANDOM,
                  numbers=n)]


def _weaker_than_relu(acts: dict) -> list[ClaimSpec]:
    """§3: GELU and SiLU drift less than ReLU, and for them the last hidden layer barely drifts
    (ours: |shift of the last hidden layer| < 0.25 x the mean |shift| of the hidden layers
    before it)."""
    relu = acts.get("relu") or {}
    specs = []
    # both bars were written with the committed reference's per-layer shifts in view
    seen = "set with the default reference's per-layer mean shifts in view"
    for act in ("gelu", "silu"):
        e = acts.get(act) or {}
        if relu.get("mean_shift_later_layers") is not None \
                and e.get("mean_shift_later_layers") is not None:
            n = {"relu": abs(relu["mean_shift_later_layers"]),
                 act: abs(e["mean_shift_later_layers"])}
            specs.append(ClaimSpec(
                id=claim_id(NAME, act, "drifts-less-than-relu"),
                text=f"{act}, random data: weaker drift than relu (|mean shift of layers 2..|)",
                measured=f"{{{act}:.2e}} vs relu {{relu:.2e}}", check=lt(n[act], n["relu"]),
                source=PAPER, where="§3, Fig. 3(a)", numbers=n, post_hoc=seen))
        shifts = _hidden_shifts(e)
        if len(shifts) >= 2:
            *before, (last, at_last) = sorted(shifts)
            n = {"last": abs(at_last), "before": float(np.mean([abs(v) for _, v in before])),
                 "ratio": 0.25, "layer": last}
            specs.append(ClaimSpec(
                id=claim_id(NAME, act, "last-layer-barely-drifts"),
                text=f"{act}, random data: the last hidden layer barely drifts (|shift| < "
                     "{ratio:g} x the mean |shift| of the hidden layers before it; the bar and "
                     "'last layer' = the last hidden layer are our reading)",
                measured="layer{layer}: {last:.2e} vs {before:.2e}",
                check=lt(n["last"], n["ratio"] * n["before"]), source=PAPER,
                where="§3, Fig. 3(a)", numbers=n, post_hoc=seen))
    return specs


def _fig9(relu: dict) -> list[ClaimSpec]:
    """App. B.1.3's Fig. 9 for ReLU on real data with Adam: a skip connection leaves the drift
    unchanged (the Z-score, blind to the sign, and the signed mean shift, each within a factor
    2 of the plain MLP's: ours) and lowers the sparsity from about 0.6 to about 0.4 (within
    0.1 each: ours)."""
    plain, skip = relu.get("digits"), relu.get("digits-skip")
    if not plain or not skip:
        return []
    specs = []
    for key, what, label in (("drift_z_final", "drift-z", "drift Z-score"),
                             ("mean_shift_later_layers", "mean-shift", "mean shift (signed)")):
        a, b = plain.get(key), skip.get(key)
        ratio = None if a is None or b is None or a == 0 else b / a
        n = {"ratio": ratio, "plain": a, "skip": b, "factor": 2.0}
        specs.append(ClaimSpec(
            id=claim_id(NAME, "relu", "digits-skip", f"{what}-unchanged"),
            text=f"relu, real data, Adam: a skip connection leaves the {label} of layers 2.. "
                 "unchanged (1/{factor:g} < skip / plain < {factor:g})",
            measured="skip {skip:+.2e} / plain {plain:+.2e} = {ratio:.3g}",
            # two inequalities, not within-factor: a ratio of the other sign must fail
            check=all_of(gt(ratio, 1 / n["factor"]), lt(ratio, n["factor"])), source=PAPER,
            where=FIG9, numbers=n))
    for cond, e, target in (("digits", plain, 0.6), ("digits-skip", skip, 0.4)):
        if e.get("sparsity_end") is not None:
            n = {"sparsity": e["sparsity_end"], "paper": target, "tol": 0.1}
            specs.append(ClaimSpec(
                id=claim_id(NAME, "relu", cond, "sparsity-near-paper"),
                text=f"relu, real data, {'with' if cond == 'digits-skip' else 'without'} a skip "
                     "connection: sparsity at the end about {paper:g} (within {tol:g})",
                measured="{sparsity:.3f}", check=within(n["sparsity"], target, n["tol"]),
                source=PAPER, where=FIG9, numbers=n, quoted=("paper",)))
    if plain.get("sparsity_end") is not None and skip.get("sparsity_end") is not None:
        n = {"plain": plain["sparsity_end"], "skip": skip["sparsity_end"]}
        specs.append(ClaimSpec(
            id=claim_id(NAME, "relu", "digits-skip", "sparsity-lower"),
            text="relu, real data: the skip connection lowers the sparsity",
            measured="{skip:.3f} vs plain {plain:.3f}", check=lt(n["skip"], n["plain"]),
            source=PAPER, where=FIG9, numbers=n))
    return specs


def _transients(acts: dict) -> list[ClaimSpec]:
    """Fig. 9: a sharp transient of the gradient magnitude in the first ~100 steps, then decay
    to a stable regime (ours: the weight-gradient norm peaks at step <= 100 and its second
    half averages < 0.5 x the peak)."""
    specs = []
    for act in POSITIVE:
        e = (acts.get(act) or {}).get("digits") or {}
        if e.get("grad_norm_peak_step") is None:
            continue
        n = {"peak_step": e["grad_norm_peak_step"], "steps": 100,
             "late": e.get("grad_norm_late_over_peak"), "ratio": 0.5}
        specs.append(ClaimSpec(
            id=claim_id(NAME, act, "digits", "gradient-transient"),
            text=f"{act}, real data, Adam: the gradient magnitude peaks within the first "
                 "~{steps} steps and then decays (second half < {ratio:g} x the peak: ours)",
            measured="peak at step {peak_step}, second half {late:.3f} x peak",
            check=all_of(le(n["peak_step"], n["steps"]), lt(n["late"], n["ratio"])),
            source=PAPER, where=FIG9, numbers=n, quoted=("steps",)))
    return specs


def _noisy_relu_drifts_most(acts: dict) -> list[ClaimSpec]:
    """Fig. 9, plain MLP: NoisyReLU drifts most (drift Z of layers 2.. above every other
    positively biased activation's)."""
    z = {act: ((acts.get(act) or {}).get("digits") or {}).get("drift_z_final") for act in POSITIVE}
    others = [v for act, v in z.items() if act != "noisy_relu" and v is not None]
    if z["noisy_relu"] is None or len(others) < 2:
        return []
    n = {"noisy": z["noisy_relu"], "best_other": max(others)}
    n["margin"] = n["noisy"] - n["best_other"]
    return [ClaimSpec(
        id=claim_id(NAME, "noisy_relu", "digits", "drifts-most"),
        text="noisy_relu, real data, Adam, plain MLP: the most pronounced drift (drift Z of "
             "layers 2.. above each other positively biased activation's)",
        measured="{noisy:.3g} vs the largest other {best_other:.3g}",
        check=gt(n["margin"], 0.0), source=PAPER, where=FIG9, numbers=n)]
