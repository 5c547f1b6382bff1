"""The claims of the ``worked-example``: the handbook's four-decimal values next to ours.

Every published value is that of "Worked example" on the handbook page "Activations and
initialization" (each claim cites the part of it, e.g. "The eight activations at three
points"); the tolerance, half a unit in the fourth decimal the page shows, is ours. Every
claim is deterministic: the inputs, weights and biases are the page's, nothing is drawn.
"""

from __future__ import annotations

from collections.abc import Sequence

from actlab.runner.claims import ClaimSpec, all_of, claim_id, judge_all, largest_gap, le, within
from actlab.runner.experiment import Claim

NAME = "worked-example"
TOL = 5e-5  # half a unit in the handbook's fourth decimal
PART = "Worked example"
COLLAPSE = f"{PART}, Two linear layers are one"
ACTIVATIONS = f"{PART}, The eight activations at three points"
CHAIN = f"{PART}, The error through a chain of four units"
SCALES = f"{PART}, Initial scales of one layer"

# The handbook's values of each part, written once. Values at z = -1.5, 0 and 0.5, then slopes.
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
PUBLISHED_COLLAPSE = {"collapsed weight": (0.0, -4.5), "collapsed bias": (2.5,),
                      "two-layer output": (-6.5,), "collapsed output": (-6.5,),
                      "ReLU hidden activations": (0.0, 1.5, 0.0), "ReLU output": (-1.0,)}
PUBLISHED_SIGMOID_CHAIN = {"net inputs": (1.0, 0.5966, 0.8739, 0.4111),
                           "errors": (-0.0198, -0.0672, -0.2447, -0.5889),
                           "weight gradients": (-0.0198, -0.0492, -0.1578, -0.4155),
                           "cost": (0.1734,), "first/output error": (0.0337,)}
PUBLISHED_RELU_CHAIN = {"net inputs": (1.0, 1.0, 1.3, 1.6), "errors": (2.16, 1.44, 1.2, 0.6),
                        "weight gradients": (2.16, 1.44, 1.2, 0.78), "cost": (0.18,)}
PUBLISHED_DEAD_CHAIN = {"output": (-0.8,), "cost": (1.62,), "errors": (0.0, 0.0, -3.6, -1.8)}
# variance, std, uniform bound, net-input variance, ReLU second moment, square-stack factor
SCALE_KEYS = ("variance", "std", "uniform_bound", "net_input_variance", "relu_second_moment",
              "square_relu_layer_factor")
PUBLISHED_SCALES = {"xavier": (0.005, 0.0707, 0.1225, 1.5, 0.75, 0.5),
                    "he": (2 / 300, 0.0816, 0.1414, 2.0, 1.0, 1.0),
                    "torch-default": (1 / 900, 1 / 30, 0.0577, 1 / 3, 1 / 6, 1 / 6)}
# Those the page writes as fractions (2 / 300, 1 / 900, 1 / 30, 1/3, 1/6), not as the number:
# not quoted.
FRACTIONS = {"he": (0,), "torch-default": (0, 1, 3, 4, 5)}
PUBLISHED_TEN_LAYERS = (1.0, 0.03125, 1.28e-4)  # std factor after ten layers: He, Xavier, default
TEN_LAYERS_TOL, TEN_LAYERS_REL = 1e-12, 0.005


def fmt_values(values) -> str:
    """Four decimals (scientific for tiny or huge values), tuples in parentheses."""
    if isinstance(values, (list, tuple)):
        return "(" + ", ".join(fmt_values(v) for v in values) + ")"
    value = float(values) + 0.0  # no "-0.0000"
    if value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e5):
        return f"{value:.4e}"
    return f"{value:.4f}"


def _groups(groups: Sequence[tuple[str, Sequence[float], Sequence[float]]],
            unquoted: Sequence[tuple[int, int]] = (), shown: str = ".4f"
            ) -> tuple[dict, str, str, tuple, list]:
    """Numbers, text and measured templates, quoted names and (measured, published) pairs of
    ``(label, measured, published)`` groups; ``unquoted`` are (group, entry) the page does not
    write as a number; ``shown`` is the format of the measured values."""
    numbers: dict = {}
    text, measured, quoted, pairs = [], [], [], []
    for g, (label, got, published) in enumerate(groups):
        got, published = [float(v) + 0.0 for v in got], [float(v) for v in published]
        names = [f"p{g}_{i}" for i in range(len(published))]
        numbers.update(zip(names, published, strict=True))
        numbers.update((f"m{g}_{i}", v) for i, v in enumerate(got))
        quoted += [name for i, name in enumerate(names) if (g, i) not in unquoted]
        fields = ", ".join(f"{{{name}:.4g}}" for name in names)
        values = ", ".join(f"{{m{g}_{i}:{shown}}}" for i in range(len(got)))
        text.append(f"{label} ({fields})" if len(names) > 1 else f"{label} {fields}")
        measured.append(f"({values})" if len(got) > 1 else values)
        pairs.append((got, published))
    return numbers, "; ".join(text), "; ".join(measured), tuple(quoted), pairs


def _spec(condition: str, what: str, title: str, where: str, groups, *, unquoted=(),
          tol: float = TOL, shown: str = ".4f", extra=None, extra_numbers: dict | None = None,
          extra_text: str = "", extra_measured: str = "",
          extra_quoted: tuple[str, ...] = ()) -> ClaimSpec:
    """Every published value of ``groups`` within ``tol`` (their largest gap is the claim's
    number), and the ``extra`` test where the text adds one."""
    numbers, text, measured, quoted, pairs = _groups(groups, unquoted, shown)
    numbers.update(tol=tol, gap=largest_gap(*pairs), **(extra_numbers or {}))
    check = le(numbers["gap"], tol)
    return ClaimSpec(
        id=claim_id(NAME, condition, what),
        text=f"{title}: {text} (each within {{tol:.0e}}){extra_text}",
        measured=f"{measured}{extra_measured}",
        check=check if extra is None else all_of(check, extra),
        source="handbook", where=where, numbers=numbers, quoted=quoted + extra_quoted,
        deterministic=True)  # fixed weights, closed forms: no seed enters any value


def claims(values: dict) -> list[Claim]:
    """Compare with the handbook's four-decimal values (tolerance half a unit in the 4th place)."""
    lc = values["linear_collapse"]
    got = {"collapsed weight": lc["collapsed_weight"], "collapsed bias": [lc["collapsed_bias"]],
           "two-layer output": [lc["two_layer_output"]],
           "collapsed output": [lc["collapsed_output"]],
           "ReLU hidden activations": lc["relu_hidden_activations"],
           "ReLU output": [lc["relu_output"]]}
    specs = [_spec("linear", "collapse-matches-handbook", "two linear layers are one",
                   COLLAPSE, [(k, got[k], p) for k, p in PUBLISHED_COLLAPSE.items()])]

    for spec, (vals, slopes) in PUBLISHED_ACTIVATIONS.items():
        entry = values["activations"][spec]
        specs.append(_spec(spec, "values-and-slopes", f"{spec} at -1.5, 0, 0.5", ACTIVATIONS,
                           [("values", entry["values"], vals),
                            ("slopes", entry["slopes"], slopes)]))

    sig = values["chain_sigmoid"]
    got = {"net inputs": sig["net_inputs"], "errors": sig["errors"],
           "weight gradients": sig["weight_gradients"], "cost": [sig["cost"]],
           "first/output error": [sig["first_over_output_error"]]}
    specs.append(_spec("sigmoid-chain", "matches-handbook", "sigmoid chain", CHAIN,
                       [(k, got[k], p) for k, p in PUBLISHED_SIGMOID_CHAIN.items()]))

    relu = values["chain_relu"]
    got = {"net inputs": relu["net_inputs"], "errors": relu["errors"],
           "weight gradients": relu["weight_gradients"], "cost": [relu["cost"]]}
    specs.append(_spec("relu-chain", "matches-handbook", "ReLU chain", CHAIN,
                       [(k, got[k], p) for k, p in PUBLISHED_RELU_CHAIN.items()]))

    dead = values["chain_relu_dead"]
    got = {"output": [dead["net_inputs"][-1]], "cost": [dead["cost"]], "errors": dead["errors"]}
    zero = {"zero_weights": 3, "m_zero": sum(1 for g in dead["weight_gradients"] if g == 0.0)}
    specs.append(_spec("relu-chain-dead", "zero-gradients", "ReLU chain with b2 = -2", CHAIN,
                       [(k, got[k], p) for k, p in PUBLISHED_DEAD_CHAIN.items()],
                       extra=within(zero["m_zero"], zero["zero_weights"], 0.0),
                       extra_numbers=zero,
                       extra_text="; w1, w2, w3 (exactly {zero_weights}) get zero gradient",
                       extra_measured="; {m_zero} zero weight gradients"))

    sc = values["initial_scales"]
    for scheme, published in PUBLISHED_SCALES.items():
        e = sc[scheme]
        specs.append(_spec(
            scheme, "initial-scales", f"{scheme} for 300 -> 100", SCALES,
            [("variance, std, uniform bound, net-input variance, ReLU second moment, "
              "square-stack factor", [e[k] for k in SCALE_KEYS], published)],
            unquoted=[(0, i) for i in FRACTIONS.get(scheme, ())]))

    tens = [sc[s]["std_after_10_layers"] for s in ("he", "xavier", "torch-default")]
    default = {"default": PUBLISHED_TEN_LAYERS[2], "rel": TEN_LAYERS_REL, "m_default": tens[2]}
    specs.append(_spec(
        "all", "ten-layer-std-factors", "after ten square ReLU layers the std factor", SCALES,
        [("of He and Xavier", tens[:2], PUBLISHED_TEN_LAYERS[:2])], tol=TEN_LAYERS_TOL, shown=".6g",
        extra=within(tens[2], default["default"], default["rel"] * default["default"]),
        extra_numbers=default,
        extra_text=" and of the default {default:.3g} (within {rel:.1%})",
        extra_measured=" and {m_default:.4g}", extra_quoted=("default",)))
    return judge_all(specs)
