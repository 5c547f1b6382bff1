"""The claims of the ``drift`` experiment, read from its summary (seed 003 §3-4, App. A-B)."""

from __future__ import annotations

import numpy as np

from actlab.analysis import layer_number
from actlab.experiments.drift.summary import parse_sweep_item
from actlab.runner.claims import claim_id
from actlab.runner.experiment import Claim
from actlab.train.optim import OPTIMIZERS

NAME = "drift"
POSITIVE = ("relu", "gelu", "silu", "noisy_relu", "sugar")  # positively biased activations


def claims(summary: dict) -> list[Claim]:
    """Drift sign per activation, tanh, gradient sign, sparsity, NoisyReLU/SUGAR vs ReLU."""
    claims: list[Claim] = []
    acts = summary.get("activations", {})
    src = "seed 003 §3, Fig. 3(a)"
    positive_shifts = []
    for act in POSITIVE:
        e = acts.get(act)
        if not e:
            continue
        if "mean_shift_later_layers" not in e:
            continue
        later, first = e["mean_shift_later_layers"], e["mean_shift_first_layer"]
        per = e["mean_shift_per_layer"]
        hidden_neg = all(v is not None and v < 0 for k, v in per.items()
                         if 2 <= layer_number(k) <= len(per) - 1)
        held = None if later is None or first is None else bool(
            hidden_neg and later < 0 and abs(first) < 0.2 * abs(later))
        if later is not None:
            positive_shifts.append(abs(later))
        claims.append(Claim(
            f"{act}, random data: weights drift negative in every hidden layer >= 2, "
            "not in layer 1 (|shift1| < 0.2 |shift later|)",
            f"shift layer1 {_fmt(first)}, layers 2-6 {_fmt(later)}", held, src,
            id=claim_id(NAME, act, "drift-negative-in-hidden-layers"), value=later,
            comparison="compound", threshold=0.0))
    tanh = acts.get("tanh")
    if tanh and positive_shifts and "mean_shift_later_layers" in tanh:
        ref = float(np.median(positive_shifts))
        value = tanh["mean_shift_later_layers"]
        claims.append(Claim("tanh, random data: no drift (|shift| < 0.2 x median |shift| of "
                            "the positively biased activations)",
                            f"tanh {_fmt(value)} vs {_fmt(ref)}",
                            None if value is None else abs(value) < 0.2 * ref, src,
                            id=claim_id(NAME, "tanh", "no-drift"),
                            value=None if value is None else abs(value), comparison="<",
                            threshold=0.2 * ref))
    for act in ("relu", "gelu", "silu"):
        e = acts.get(act)
        if e and e.get("preact_grad_mean_init") is not None:
            g, c = e["preact_grad_mean_init"], e.get("preact_grad_cov_init")
            held = g > 0 and c is not None and abs(c) < 0.1 * g
            claims.append(Claim(f"{act}: mean pre-activation gradient > 0 at init, covariance "
                                "term < 0.1x of it (hidden layers)",
                                f"grad mean {_fmt(g)}, cov {_fmt(c)}", held,
                                "seed 003 Thm 2.2, Fig. 3(b)",
                                id=claim_id(NAME, act, "positive-preact-gradient-at-init"),
                                value=g, comparison="compound", threshold=0.0))
    relu = acts.get("relu")
    if relu:
        for cond, label in (("main", "random data"), ("digits", "digits")):
            e = relu if cond == "main" else relu.get("digits")
            if e and e.get("sparsity_start") is not None and e.get("sparsity_end") is not None:
                s0, s1 = e["sparsity_start"], e["sparsity_end"]
                claims.append(Claim(f"relu without norm, {label}: sparsity rises over training "
                                    "(by > 0.02)", f"{s0:.3f} -> {s1:.3f}", s1 > s0 + 0.02,
                                    "seed 003 §4, App. B.1.3",
                                    id=claim_id(NAME, "relu", cond, "sparsity-rises"),
                                    value=s1, comparison=">", threshold=s0 + 0.02))
        dg = relu.get("digits")
        if dg and dg.get("mean_shift_later_layers") is not None:
            claims.append(Claim("relu on real data (digits, cross-entropy, Adam): weights of layers "
                                "2-6 drift negative", _fmt(dg["mean_shift_later_layers"]),
                                dg["mean_shift_later_layers"] < 0, "seed 003 §3, App. B.1.3 (CIFAR-10)",
                                id=claim_id(NAME, "relu", "digits", "drift-negative"),
                                value=dg["mean_shift_later_layers"], comparison="<",
                                threshold=0.0))
        di = relu.get("default-init")
        if di and relu.get("mean_shift_later_layers") is not None and di["mean_shift_later_layers"] is not None:
            he, dflt = relu["mean_shift_later_layers"], di["mean_shift_later_layers"]
            claims.append(Claim("relu: PyTorch's default Linear init hides the drift "
                                "(|shift| < 0.1x the He-init shift)",
                                f"default {_fmt(dflt)} vs He {_fmt(he)}",
                                abs(dflt) < 0.1 * abs(he), "issue prototype",
                                id=claim_id(NAME, "relu", "default-init", "hides-drift"),
                                value=abs(dflt), comparison="<", threshold=0.1 * abs(he)))
        sk = relu.get("skip")
        if sk and sk["mean_shift_later_layers"] is not None:
            claims.append(Claim("relu with skip connections: drift still negative",
                                f"{_fmt(sk['mean_shift_later_layers'])}",
                                sk["mean_shift_later_layers"] < 0, "seed 003 App. A.3",
                                id=claim_id(NAME, "relu", "skip", "drift-negative"),
                                value=sk["mean_shift_later_layers"], comparison="<",
                                threshold=0.0))
    for act in ("noisy_relu", "sugar"):
        e = acts.get(act)
        if e and e.get("loss_gap_vs_relu") is not None:
            gap = e["loss_gap_vs_relu"]
            claims.append(Claim(f"{act} trains differently from ReLU (paired seeds: relative "
                                "mean loss gap > 1e-3)", f"gap {gap:.2e}", gap > 1e-3,
                                "seeds README (released code trained both as ReLU)",
                                id=claim_id(NAME, act, "trains-differently-from-relu"),
                                value=gap, comparison=">", threshold=1e-3))
    sweep = summary.get("sweep", {}).get("relu", {})
    by = {k: v.get("drift_z_final") for k, v in sweep.items()}
    settings = {k: parse_sweep_item(k) for k in by}
    for lr_key in sorted({f"{lr:g}" for _, lr in settings.values()}):
        sgd, mom = by.get(f"sgd:{lr_key}"), by.get(f"momentum:{lr_key}")
        both_ran = f"sgd:{lr_key}" in by and f"momentum:{lr_key}" in by
        if both_ran and (sgd is None or mom is None):
            claims.append(Claim(f"relu, lr {lr_key}: momentum drifts faster than plain SGD",
                                _diverged_text(sweep, (f"sgd:{lr_key}", f"momentum:{lr_key}")),
                                None, "seed 003 §3, Fig. 2",
                                id=claim_id(NAME, "relu", f"lr-{lr_key}",
                                            "momentum-drifts-faster")))
        if sgd is not None and mom is not None:
            claims.append(Claim(f"relu, lr {lr_key}: momentum drifts faster than plain SGD",
                                f"drift Z {mom:.3g} vs {sgd:.3g}", mom > sgd, "seed 003 §3, Fig. 2",
                                id=claim_id(NAME, "relu", f"lr-{lr_key}",
                                            "momentum-drifts-faster"),
                                value=mom, comparison=">", threshold=sgd))
    for opt in OPTIMIZERS:  # orders the learning-rate claims
        pairs = sorted((settings[k][1], v) for k, v in by.items()
                       if settings[k][0] == opt and v is not None)
        lost = [k for k, v in by.items() if settings[k][0] == opt and v is None]
        if lost and len(pairs) + len(lost) >= 2:
            claims.append(Claim(f"relu, {opt}: a higher learning rate gives larger drift",
                                _diverged_text(sweep, lost), None, "seed 003 §3, Fig. 2",
                                id=claim_id(NAME, "relu", opt, "higher-lr-larger-drift")))
            continue
        if len(pairs) >= 2:
            increasing = all(b[1] > a[1] for a, b in zip(pairs, pairs[1:]))
            claims.append(Claim(f"relu, {opt}: a higher learning rate gives larger drift",
                                ", ".join(f"lr {lr:g}: {v:.3g}" for lr, v in pairs), increasing,
                                "seed 003 §3, Fig. 2",
                                id=claim_id(NAME, "relu", opt, "higher-lr-larger-drift"),
                                value=min(b[1] - a[1] for a, b in zip(pairs, pairs[1:])),
                                comparison=">", threshold=0.0))
    return claims


def _diverged_text(sweep: dict, settings: tuple[str, ...] | list[str]) -> str:
    """Which sweep settings have no drift to compare because every seed diverged."""
    lost = [f"{k} ({sweep[k].get('diverged_seeds', '?')} seeds diverged)" for k in settings
            if sweep.get(k, {}).get("drift_z_final") is None]
    return "no finished run: " + ", ".join(lost)


def _fmt(value: float | None) -> str:
    """A signed shift in scientific notation, ``n/a`` without one."""
    return "n/a" if value is None else f"{value:+.2e}"
