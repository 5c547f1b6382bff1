"""The claims of the ``worked-example``: the handbook's four-decimal values next to ours."""

from __future__ import annotations

from actlab.runner.claims import claim_id, largest_gap
from actlab.runner.experiment import Claim

# The handbook's values (seed 001, "Worked example"), checked by ``claims`` and the tests.
NAME = "worked-example"
TOL = 5e-5  # half a unit in the handbook's fourth decimal
PUBLISHED_ACTIVATIONS = {
    "sigmoid": ((0.1824, 0.5000, 0.6225), (0.1491, 0.2500, 0.2350)),
    "tanh": ((-0.9051, 0.0, 0.4621), (0.1807, 1.0, 0.7864)),
    "relu": ((0.0, 0.0, 0.5), (0.0, 0.0, 1.0)),
    "leaky_relu": ((-0.0150, 0.0, 0.5), (0.0100, 0.0100, 1.0)),
    "elu": ((-0.7769, 0.0, 0.5), (0.2231, 1.0, 1.0)),
    "gelu": ((-0.1002, 0.0, 0.3457), (-0.1275, 0.5, 0.8675)),
    "silu": ((-0.2736, 0.0, 0.3112), (-0.0413, 0.5, 0.7400)),
    "softplus": ((0.2014, 0.6931, 0.9741), (0.1824, 0.5, 0.6225)),
}


def fmt_values(values) -> str:
    """Four decimals (scientific for tiny or huge values), tuples in parentheses."""
    if isinstance(values, (list, tuple)):
        return "(" + ", ".join(fmt_values(v) for v in values) + ")"
    value = float(values) + 0.0  # no "-0.0000"
    if value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e5):
        return f"{value:.4e}"
    return f"{value:.4f}"


def _close(measured, published, tol: float = TOL) -> bool:
    return all(abs(a - b) <= tol for a, b in zip(measured, published, strict=True))


def claims(values: dict) -> list[Claim]:
    """Compare with the handbook's four-decimal values (tolerance half a unit in the 4th place)."""
    src = "seed 001, Worked example"
    out = []

    def add(cond: str, slug: str, text: str, measured: str, *pairs, tol: float = TOL,
            extra: bool | None = None) -> None:
        # Held: every published number within ``tol`` (and ``extra`` when the text adds one).
        gap = largest_gap(*pairs)
        held = all(_close(m, p, tol) for m, p in pairs)
        out.append(Claim(text, measured, held if extra is None else held and extra, src,
                         id=claim_id(NAME, cond, slug), value=gap,
                         comparison="<=" if extra is None else "compound", threshold=tol))

    lc = values["linear_collapse"]
    add("linear", "collapse-matches-handbook",
        "collapsed weight (0, -4.5), bias 2.5; outputs -6.5 = -6.5; with ReLU "
        "hidden (0, 1.5, 0) and output -1.0",
        f"{fmt_values(lc['collapsed_weight'])}, {lc['collapsed_bias']:.4f}; "
        f"{lc['two_layer_output']:.4f} = {lc['collapsed_output']:.4f}; "
        f"{fmt_values(lc['relu_hidden_activations'])}, {lc['relu_output']:.4f}",
        (lc["collapsed_weight"], (0.0, -4.5)),
        ([lc["collapsed_bias"], lc["two_layer_output"], lc["collapsed_output"],
          lc["relu_output"]], (2.5, -6.5, -6.5, -1.0)),
        (lc["relu_hidden_activations"], (0.0, 1.5, 0.0)))
    for spec, (vals, slopes) in PUBLISHED_ACTIVATIONS.items():
        entry = values["activations"][spec]
        add(spec, "values-and-slopes", f"{spec} at -1.5, 0, 0.5: values {vals}, slopes {slopes}",
            f"{fmt_values(entry['values'])}; {fmt_values(entry['slopes'])}",
            (entry["values"], vals), (entry["slopes"], slopes))
    sig = values["chain_sigmoid"]
    add("sigmoid-chain", "matches-handbook",
        "sigmoid chain: net inputs (1.0000, 0.5966, 0.8739, 0.4111), errors "
        "(-0.0198, -0.0672, -0.2447, -0.5889), weight gradients (-0.0198, -0.0492, "
        "-0.1578, -0.4155), cost 0.1734, first/output error 0.0337",
        f"{fmt_values(sig['net_inputs'])}, {fmt_values(sig['errors'])}, "
        f"{fmt_values(sig['weight_gradients'])}, {sig['cost']:.4f}, "
        f"{sig['first_over_output_error']:.4f}",
        (sig["net_inputs"], (1.0, 0.5966, 0.8739, 0.4111)),
        (sig["errors"], (-0.0198, -0.0672, -0.2447, -0.5889)),
        (sig["weight_gradients"], (-0.0198, -0.0492, -0.1578, -0.4155)),
        ([sig["cost"], sig["first_over_output_error"]], (0.1734, 0.0337)))
    relu = values["chain_relu"]
    add("relu-chain", "matches-handbook",
        "ReLU chain: net inputs (1.0, 1.0, 1.3, 1.6), errors (2.16, 1.44, 1.2, "
        "0.6), weight gradients (2.16, 1.44, 1.2, 0.78), cost 0.18",
        f"{fmt_values(relu['net_inputs'])}, {fmt_values(relu['errors'])}, "
        f"{fmt_values(relu['weight_gradients'])}, {relu['cost']:.4f}",
        (relu["net_inputs"], (1.0, 1.0, 1.3, 1.6)), (relu["errors"], (2.16, 1.44, 1.2, 0.6)),
        (relu["weight_gradients"], (2.16, 1.44, 1.2, 0.78)), ([relu["cost"]], (0.18,)))
    dead = values["chain_relu_dead"]
    zero_grads = sum(1 for g in dead["weight_gradients"] if g == 0.0)
    add("relu-chain-dead", "zero-gradients",
        "ReLU chain with b2 = -2: output -0.8, cost 1.62, errors (0, 0, -3.6, -1.8); "
        "w1, w2, w3 get zero gradient",
        f"output {dead['net_inputs'][-1]:.4f}, cost {dead['cost']:.4f}, errors "
        f"{fmt_values(dead['errors'])}, {zero_grads} zero weight gradients",
        ([dead["net_inputs"][-1], dead["cost"]], (-0.8, 1.62)),
        (dead["errors"], (0.0, 0.0, -3.6, -1.8)), extra=zero_grads == 3)
    sc = values["initial_scales"]
    published = {"xavier": (0.005, 0.0707, 0.1225, 1.5, 0.75, 0.5),
                 "he": (2 / 300, 0.0816, 0.1414, 2.0, 1.0, 1.0),
                 "torch-default": (1 / 900, 1 / 30, 0.0577, 1 / 3, 1 / 6, 1 / 6)}
    for scheme, pub in published.items():
        e = sc[scheme]
        got = (e["variance"], e["std"], e["uniform_bound"], e["net_input_variance"],
               e["relu_second_moment"], e["square_relu_layer_factor"])
        add(scheme, "initial-scales", f"{scheme} for 300 -> 100: variance, std, uniform bound, "
            f"net-input variance, ReLU second moment, square-stack factor = {fmt_values(pub)}",
            fmt_values(got), (got, pub))
    tens = [sc[s]["std_after_10_layers"] for s in ("he", "xavier", "torch-default")]
    add("all", "ten-layer-std-factors", "after ten square ReLU layers the std factor is 1, 1/32 "
        "and 1.28e-4", fmt_values(tens), (tens[:2], (1.0, 0.03125)), tol=1e-12,
        extra=abs(tens[2] / 1.28e-4 - 1) < 0.005)
    return out
