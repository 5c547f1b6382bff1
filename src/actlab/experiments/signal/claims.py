"""The claims of the ``signal`` experiment: the handbook's published figures next to ours."""

from __future__ import annotations

import math

from actlab.runner.claims import claim_id
from actlab.runner.experiment import Claim

NAME = "signal"

# Published values of the handbook page (seed 001) that the claims compare with.
PUBLISHED = {
    "sigmoid_error_layer20": 2.1e-2,
    "sigmoid_error_layer1": 2.0e-14,
    "sigmoid_error_factor": 4.3,
    "sigmoid_grad_ratio": 1.8e-12,
    "relu_xavier_std_layer20": 1.1e-3,
    "relu_xavier_grad": (6.4e-3, 9.2e-3),
    "relu_he_grad": (6.7, 9.7),
    "relu_1.5he_std_layer20": 3.8e3,
    "relu_1.5he_grad": (2.6e7, 3.6e7),
    "tanh_0.01_std_layer1": 0.156,
    "tanh_0.2_beyond_layer10": 0.334,
    "tanh_xavier_std_layer10": 0.2308,
    "relu_xavier_hist": (0.5829, 0.0215),
    "relu_he_hist_range": (0.64, 0.86),
    "relu_1.41he_hist": (1.1658, 21.9995),
    "tanh_xavier_z10": (0.2440, 0.2409),
    "tanh_5/3_z10": (1.1063, 1.0858, 0.0166),
    "tanh_fixed_z10": (1.0199, 1.0003, 0.0094),
}


def _within_factor(value: float, target: float, factor: float) -> bool:
    return math.isfinite(value) and target / factor <= value <= target * factor


def claims(summary: dict) -> list[Claim]:
    """The published figures of seed 001 next to ours (single random draws, so factor tolerances)."""
    src = "seed 001, Checking the predictions"
    p, h, s = summary["profiles"], summary["histograms"], summary["saturation"]
    out: list[Claim] = []
    sig = p["sigmoid-xavier"]
    factor = sig["error_factor_per_layer"]
    out.append(Claim("sigmoid+Xavier: error shrinks ~4.3x per layer (2.1e-2 in layer 20 to "
                     "2.0e-14 in layer 1); tolerance: factor within 10%, end values within 2x",
                     f"{factor:.2f}x per layer, {sig['error_rms'][-1]:.2e} -> {sig['error_rms'][0]:.2e}",
                     abs(factor / PUBLISHED["sigmoid_error_factor"] - 1) <= 0.1
                     and _within_factor(sig["error_rms"][-1], 2.1e-2, 2)
                     and _within_factor(sig["error_rms"][0], 2.0e-14, 2), src,
                     id=claim_id(NAME, "sigmoid-xavier", "error-shrinks-4.3-per-layer"), value=factor,
                     comparison="compound", threshold=0.1, reference=PUBLISHED["sigmoid_error_factor"]))
    ratio = sig["first_over_last_grad"]
    out.append(Claim("sigmoid+Xavier: first-layer (per-example) weight gradient 1.8e-12 of the "
                     "last hidden layer's; tolerance 10x", f"{ratio:.2e}",
                     _within_factor(ratio, 1.8e-12, 10), src,
                     id=claim_id(NAME, "sigmoid-xavier", "first-over-last-gradient"), value=ratio,
                     comparison="within-factor", threshold=10, reference=1.8e-12))
    he = p["relu-he"]
    spread = {m: max(he[m]) / min(he[m]) for m in ("activation_std", "error_rms")}
    out.append(Claim("ReLU+He: forward and backward sizes within a factor of two across 20 layers",
                     f"max/min activation std {spread['activation_std']:.2f}, error {spread['error_rms']:.2f}",
                     max(spread.values()) <= 2.0, src,
                     id=claim_id(NAME, "relu-he", "sizes-within-factor-two"), value=max(spread.values()),
                     comparison="<=", threshold=2.0))
    xa = p["relu-xavier"]
    lo, hi = xa["per_example_grad_range"]
    out.append(Claim("ReLU+Xavier: std 1.1e-3 in layer 20 (within 2x); per-example weight "
                     "gradients flat, 6.4e-3..9.2e-3 (range within 1.5x)",
                     f"{xa['net_input_std'][-1]:.2e}; {lo:.2e}..{hi:.2e}",
                     _within_factor(xa["net_input_std"][-1], 1.1e-3, 2)
                     and lo >= 6.4e-3 / 1.5 and hi <= 9.2e-3 * 1.5, src,
                     id=claim_id(NAME, "relu-xavier", "std-and-flat-gradients"), value=xa["net_input_std"][-1],
                     comparison="compound", threshold=2, reference=0.0011))
    lo_he, hi_he = he["per_example_grad_range"]
    out.append(Claim("ReLU+He per-example gradients 6.7..9.7, about 2^10 times Xavier's "
                     "(range within 1.5x; ratio within 2x of 1024)",
                     f"{lo_he:.2f}..{hi_he:.2f}; ratio {lo_he / lo:.0f}",
                     lo_he >= 6.7 / 1.5 and hi_he <= 9.7 * 1.5
                     and _within_factor(lo_he / lo, 1024, 2), src,
                     id=claim_id(NAME, "relu-he", "gradients-2-10-times-xavier"), value=lo_he / lo,
                     comparison="compound", threshold=2, reference=1024))
    big = p["relu-1.5he"]
    lo_b, hi_b = big["per_example_grad_range"]
    out.append(Claim("ReLU+1.5xHe: std 3.8e3 in layer 20; per-example gradients 2.6e7..3.6e7 "
                     "(within 2x)", f"{big['net_input_std'][-1]:.2e}; {lo_b:.2e}..{hi_b:.2e}",
                     _within_factor(big["net_input_std"][-1], 3.8e3, 2)
                     and lo_b >= 2.6e7 / 2 and hi_b <= 3.6e7 * 2, src,
                     id=claim_id(NAME, "relu-1.5he", "std-and-gradients"), value=big["net_input_std"][-1],
                     comparison="compound", threshold=2, reference=3800.0))
    worst = max(max(e["max_abs_log10_error_of_prediction"][m] for m in
                    ("net_input_std", "error_rms", "per_example_grad_rms"))
                for e in p.values())
    out.append(Claim("dashed predictions follow the measured curves (every layer, every setting, "
                     "net input, error, per-example gradient within 2x)",
                     f"worst |log10(measured/predicted)| = {worst:.3f}", worst <= math.log10(2), src,
                     id=claim_id(NAME, "all", "predictions-follow-measured"), value=worst,
                     comparison="<=", threshold=math.log10(2)))
    t1 = h["tanh-std0.01"]["activation_std"]
    out.append(Claim("tanh std 0.01: activation std 0.156 in layer 1 (within 5%), below 1e-4 from "
                     "layer 6", f"{t1[0]:.4f}; max from layer 6 {max(t1[5:]):.1e}",
                     abs(t1[0] / 0.156 - 1) <= 0.05 and max(t1[5:]) < 1e-4, src,
                     id=claim_id(NAME, "tanh-std0.01", "activation-std-vanishes"), value=max(t1[5:]),
                     comparison="compound", threshold=0.0001))
    t2 = h["tanh-std0.2"]["share_beyond_0.99"][-1]
    out.append(Claim("tanh std 0.2: 33.4% of layer-10 activations beyond 0.99 (within 3 points)",
                     f"{100 * t2:.1f}%", abs(t2 - 0.334) <= 0.03, src,
                     id=claim_id(NAME, "tanh-std0.2", "saturated-share"), value=t2,
                     comparison="within", threshold=0.03, reference=0.334))
    tx = h["tanh-xavier"]["activation_std"][-1]
    out.append(Claim("tanh Xavier: activation std 0.2308 in layer 10 (within 10%)", f"{tx:.4f}",
                     abs(tx / 0.2308 - 1) <= 0.1, src,
                     id=claim_id(NAME, "tanh-xavier", "activation-std-layer-10"), value=tx / 0.2308,
                     comparison="within", threshold=0.1, reference=1.0))
    rx = h["relu-xavier"]["activation_std"]
    # After ten random ReLU layers of 256 units the std is a product of ten random layer
    # gains, each with relative spread ~ sqrt(5/256)/2 = 7%, so about 22% after ten layers:
    # layer-10 values get a +-50% band (two standard deviations), layer 1 a 5% band.
    out.append(Claim("ReLU Xavier: activation std 0.5829 -> 0.0215 over 10 layers (layer 1 "
                     "within 5%, layer 10 within 50%: ten random layer gains)",
                     f"{rx[0]:.4f} -> {rx[-1]:.4f}",
                     abs(rx[0] / 0.5829 - 1) <= 0.05 and abs(rx[-1] / 0.0215 - 1) <= 0.5, src,
                     id=claim_id(NAME, "relu-xavier", "activation-std-decays"), value=rx[-1],
                     comparison="compound", threshold=0.5, reference=0.0215))
    rh = h["relu-he"]["activation_std"]
    out.append(Claim("ReLU He: activation std between 0.64 and 0.86 (within 10%)",
                     f"{min(rh):.3f}..{max(rh):.3f}", min(rh) >= 0.64 * 0.9 and max(rh) <= 0.86 * 1.1,
                     src, id=claim_id(NAME, "relu-he", "activation-std-range"), value=max(rh),
                     comparison="compound", threshold=0.9460000000000001))
    r2 = h["relu-1.41he"]["activation_std"]
    out.append(Claim("ReLU sqrt(2)xHe: activation std 1.1658 -> 21.9995 (layer 1 within 5%, "
                     "layer 10 within 50%)", f"{r2[0]:.4f} -> {r2[-1]:.4f}",
                     abs(r2[0] / 1.1658 - 1) <= 0.05 and abs(r2[-1] / 21.9995 - 1) <= 0.5, src,
                     id=claim_id(NAME, "relu-1.41he", "activation-std-grows"), value=r2[-1],
                     comparison="compound", threshold=0.5, reference=21.9995))
    for run, key, label in (("tanh-xavier", "tanh_xavier_z10", "Xavier"),
                            ("tanh-xavier-5/3", "tanh_5/3_z10", "gain 5/3"),
                            ("tanh-fixed-point", "tanh_fixed_z10", "fixed-point gain")):
        pub = PUBLISHED[key]
        m = s[run]
        text = (f"tanh {label}: layer-10 net-input std {pub[0]} (predicted {pub[1]}); "
                "tolerance 5% (measured) and 1% (prediction)")
        held = (abs(m["net_input_std_last"] / pub[0] - 1) <= 0.05
                and abs(m["predicted_net_input_std_last"] / pub[1] - 1) <= 0.01)
        measured = f"{m['net_input_std_last']:.4f} (predicted {m['predicted_net_input_std_last']:.4f})"
        if len(pub) == 3:
            text += f", {100 * pub[2]:.2f}% saturated (within 0.5 points)"
            measured += f", {100 * m['saturated_share_last']:.2f}% saturated"
            held = held and abs(m["saturated_share_last"] - pub[2]) <= 0.005
        out.append(Claim(text, measured, held, src, id=claim_id(NAME, run, "net-input-std-layer-10"),
                         value=m["net_input_std_last"], comparison="compound", threshold=0.05,
                         reference=pub[0]))
    return out
