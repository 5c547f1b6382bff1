"""The claims of the ``signal`` experiment: the handbook's published figures next to ours.

Every claim checks a statement of the handbook page "Activations and initialization",
"Checking the predictions", whose numbers are quoted; the tolerances are ours (single random
draws, so mostly factor tolerances).
"""

from __future__ import annotations

import math

from actlab.runner.claims import (
    ClaimSpec,
    all_of,
    claim_id,
    ge,
    judge_all,
    le,
    lt,
    within,
    within_factor,
)
from actlab.runner.experiment import Claim

NAME = "signal"
WHERE = "Checking the predictions"

# The handbook's layer-10 net-input std of the tanh network (measured, predicted) and the
# saturated share where it gives one, per run.
TANH_LAYER_10 = {
    "tanh-xavier": ("Xavier", 0.2440, 0.2409, None),
    "tanh-xavier-5/3": ("gain 5/3", 1.1063, 1.0858, 0.0166),
    "tanh-fixed-point": ("fixed-point gain", 1.0199, 1.0003, 0.0094),
}


def _spec(condition: str, what: str, text: str, measured: str, check, numbers: dict,
          quoted: tuple[str, ...] = ()) -> ClaimSpec:
    return ClaimSpec(id=claim_id(NAME, condition, what), text=text, measured=measured,
                     check=check, source="handbook", where=WHERE, numbers=numbers,
                     quoted=quoted)


def _relu_std_ends(histograms: dict, run: str, what: str, label: str, first: float,
                   last: float) -> ClaimSpec:
    """Activation std of layer 1 (within 5%) and layer 10 (within 50%) against the handbook's."""
    std = histograms[run]["activation_std"]
    n = {"std1": first, "std10": last, "rel1": 0.05, "rel10": 0.5, "m_std1": std[0],
         "m_std10": std[-1]}
    return _spec(
        run, what,
        label + ": activation std {std1} -> {std10} over 10 layers (layer 1 within {rel1:.0%}, "
        "layer 10 within {rel10:.0%}: ten random layer gains)",
        "{m_std1:.4f} -> {m_std10:.4f}",
        all_of(within(n["m_std10"], last, n["rel10"] * last),
               within(n["m_std1"], first, n["rel1"] * first)),
        n, ("std1", "std10"))


def claims(summary: dict) -> list[Claim]:
    """The handbook's published figures next to ours."""
    p, h, s = summary["profiles"], summary["histograms"], summary["saturation"]
    specs = []

    sig = p["sigmoid-xavier"]
    n = {"factor": 4.3, "rel": 0.1, "e20": 2.1e-2, "e1": 2.0e-14, "end_factor": 2.0,
         "m_factor": sig["error_factor_per_layer"], "m_e20": sig["error_rms"][-1],
         "m_e1": sig["error_rms"][0]}
    specs.append(_spec(
        "sigmoid-xavier", "error-shrinks-4.3-per-layer",
        "sigmoid+Xavier: error shrinks ~{factor}x per layer ({e20:.1e} in layer 20 to {e1:.1e} "
        "in layer 1); tolerance: factor within {rel:.0%}, end values within {end_factor:g}x",
        "{m_factor:.2f}x per layer, {m_e20:.2e} -> {m_e1:.2e}",
        all_of(within(n["m_factor"], n["factor"], n["rel"] * n["factor"]),
               within_factor(n["m_e20"], n["e20"], n["end_factor"]),
               within_factor(n["m_e1"], n["e1"], n["end_factor"])),
        n, ("factor", "e20", "e1")))

    n = {"published": 1.8e-12, "factor": 10.0, "m": sig["first_over_last_grad"]}
    specs.append(_spec(
        "sigmoid-xavier", "first-over-last-gradient",
        "sigmoid+Xavier: first-layer (per-example) weight gradient {published:.1e} of the last "
        "hidden layer's; tolerance {factor:g}x", "{m:.2e}",
        within_factor(n["m"], n["published"], n["factor"]), n, ("published",)))

    he = p["relu-he"]
    n = {"factor": 2.0, "m_act": max(he["activation_std"]) / min(he["activation_std"]),
         "m_err": max(he["error_rms"]) / min(he["error_rms"])}
    specs.append(_spec(
        "relu-he", "sizes-within-factor-two",
        "ReLU+He: forward and backward sizes within a factor of two across 20 layers",
        "max/min activation std {m_act:.2f}, error {m_err:.2f}",
        le(max(n["m_act"], n["m_err"]), n["factor"]), n))

    xa = p["relu-xavier"]
    n = {"std20": 1.1e-3, "factor": 2.0, "lo": 6.4e-3, "hi": 9.2e-3, "range_factor": 1.5,
         "m_std20": xa["net_input_std"][-1], "m_lo": xa["per_example_grad_range"][0],
         "m_hi": xa["per_example_grad_range"][1]}
    specs.append(_spec(
        "relu-xavier", "std-and-flat-gradients",
        "ReLU+Xavier: std {std20:.1e} in layer 20 (within {factor:g}x); per-example weight "
        "gradients flat, {lo:.1e}..{hi:.1e} (range within {range_factor:g}x)",
        "{m_std20:.2e}; {m_lo:.2e}..{m_hi:.2e}",
        all_of(within_factor(n["m_std20"], n["std20"], n["factor"]),
               ge(n["m_lo"], n["lo"] / n["range_factor"]),
               le(n["m_hi"], n["hi"] * n["range_factor"])),
        n, ("std20", "lo", "hi")))

    n = {"lo": 6.7, "hi": 9.7, "range_factor": 1.5, "ratio": 1024.0, "factor": 2.0,
         "m_lo": he["per_example_grad_range"][0], "m_hi": he["per_example_grad_range"][1]}
    n["m_ratio"] = n["m_lo"] / xa["per_example_grad_range"][0]
    specs.append(_spec(
        "relu-he", "gradients-2-10-times-xavier",
        "ReLU+He per-example gradients {lo}..{hi}, about 2^10 times Xavier's (range within "
        "{range_factor:g}x; ratio within {factor:g}x of {ratio:.0f})",
        "{m_lo:.2f}..{m_hi:.2f}; ratio {m_ratio:.0f}",
        all_of(within_factor(n["m_ratio"], n["ratio"], n["factor"]),
               ge(n["m_lo"], n["lo"] / n["range_factor"]),
               le(n["m_hi"], n["hi"] * n["range_factor"])),
        n, ("lo", "hi")))

    big = p["relu-1.5he"]
    n = {"std20": 3.8e3, "lo": 2.6e7, "hi": 3.6e7, "factor": 2.0,
         "m_std20": big["net_input_std"][-1], "m_lo": big["per_example_grad_range"][0],
         "m_hi": big["per_example_grad_range"][1]}
    specs.append(_spec(
        "relu-1.5he", "std-and-gradients",
        "ReLU+1.5xHe: std {std20:.1e} in layer 20; per-example gradients {lo:.1e}..{hi:.1e} "
        "(within {factor:g}x)", "{m_std20:.2e}; {m_lo:.2e}..{m_hi:.2e}",
        all_of(within_factor(n["m_std20"], n["std20"], n["factor"]),
               ge(n["m_lo"], n["lo"] / n["factor"]), le(n["m_hi"], n["hi"] * n["factor"])),
        n, ("std20", "lo", "hi")))

    n = {"factor": 2.0, "worst": max(
        max(e["max_abs_log10_error_of_prediction"][m]
            for m in ("net_input_std", "error_rms", "per_example_grad_rms"))
        for e in p.values())}
    specs.append(_spec(
        "all", "predictions-follow-measured",
        "dashed predictions follow the measured curves (every layer, every setting, net "
        "input, error, per-example gradient within {factor:g}x)",
        "worst |log10(measured/predicted)| = {worst:.3f}",
        le(n["worst"], math.log10(n["factor"])), n))

    t1 = h["tanh-std0.01"]["activation_std"]
    n = {"std1": 0.156, "rel": 0.05, "below": 1e-4, "from_layer": 6, "m_std1": t1[0]}
    n["m_rest"] = max(t1[n["from_layer"] - 1:])
    specs.append(_spec(
        "tanh-std0.01", "activation-std-vanishes",
        "tanh std 0.01: activation std {std1} in layer 1 (within {rel:.0%}), below {below:.0e} "
        "from layer {from_layer}", "{m_std1:.4f}; max from layer {from_layer} {m_rest:.1e}",
        all_of(lt(n["m_rest"], n["below"]), within(n["m_std1"], n["std1"], n["rel"] * n["std1"])),
        n, ("std1", "from_layer")))

    n = {"published": 0.334, "tol": 0.03, "m": h["tanh-std0.2"]["share_beyond_0.99"][-1]}
    specs.append(_spec(
        "tanh-std0.2", "saturated-share",
        "tanh std 0.2: {published:.1%} of layer-10 activations beyond 0.99 (within "
        "{tol:.0%} absolute)", "{m:.1%}",
        within(n["m"], n["published"], n["tol"]), n, ("published",)))

    n = {"published": 0.2308, "rel": 0.1, "m": h["tanh-xavier"]["activation_std"][-1]}
    n["ratio"] = n["m"] / n["published"]
    specs.append(_spec(
        "tanh-xavier", "activation-std-layer-10",
        "tanh Xavier: activation std {published} in layer 10 (within {rel:.0%})",
        "{m:.4f} ({ratio:.3f} of it)",
        within(n["ratio"], 1.0, n["rel"]), n, ("published",)))

    # After ten random ReLU layers of 256 units the std is a product of ten random layer
    # gains, each with relative spread ~ sqrt(5/256)/2 = 7%, so about 22% after ten layers:
    # layer-10 values get a +-50% band (two standard deviations), layer 1 a 5% band.
    specs.append(_relu_std_ends(h, "relu-xavier", "activation-std-decays", "ReLU Xavier",
                                0.5829, 0.0215))
    rh = h["relu-he"]["activation_std"]
    n = {"lo": 0.64, "hi": 0.86, "rel": 0.1, "m_lo": min(rh), "m_hi": max(rh)}
    specs.append(_spec(
        "relu-he", "activation-std-range",
        "ReLU He: activation std between {lo} and {hi} (within {rel:.0%})",
        "{m_lo:.3f}..{m_hi:.3f}",
        all_of(le(n["m_hi"], n["hi"] * (1 + n["rel"])), ge(n["m_lo"], n["lo"] * (1 - n["rel"]))),
        n, ("lo", "hi")))
    specs.append(_relu_std_ends(h, "relu-1.41he", "activation-std-grows", "ReLU sqrt(2)xHe",
                                1.1658, 21.9995))

    for run, (label, std10, predicted, saturated) in TANH_LAYER_10.items():
        m = s[run]
        n = {"std10": std10, "predicted": predicted, "saturated": saturated, "rel": 0.05,
             "rel_predicted": 0.01, "tol_saturated": 0.005, "m_std10": m["net_input_std_last"],
             "m_predicted": m["predicted_net_input_std_last"],
             "m_saturated": m["saturated_share_last"]}
        text = (f"tanh {label}: " + "layer-10 net-input std {std10:.4f} (predicted {predicted:.4f}); "
                "tolerance {rel:.0%} (measured) and {rel_predicted:.0%} (prediction)")
        measured = "{m_std10:.4f} (predicted {m_predicted:.4f})"
        tests = [within(n["m_std10"], std10, n["rel"] * std10),
                 within(n["m_predicted"], predicted, n["rel_predicted"] * predicted)]
        quoted = ("std10", "predicted")
        if saturated is not None:
            text += ", {saturated:.2%} saturated (within {tol_saturated:.1%} absolute)"
            measured += ", {m_saturated:.2%} saturated"
            tests.append(within(n["m_saturated"], saturated, n["tol_saturated"]))
            quoted += ("saturated",)
        specs.append(_spec(run, "net-input-std-layer-10", text, measured, all_of(*tests), n,
                           quoted))
    return judge_all(specs)
