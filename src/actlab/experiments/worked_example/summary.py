"""The ``worked-example``'s summary: the values its one unit computed, and their printout."""

from __future__ import annotations

from actlab.experiments.worked_example.claims import fmt_values


def build_summary(results: list[dict]) -> dict:
    """The nested values of the unit that computed them (the summary is those values)."""
    return next(r["data"]["values"] for r in results if "values" in r.get("data", {}))


def format_worked_example(values: dict) -> str:
    """Every value of :func:`~actlab.experiments.worked_example.worked_example_values` as text."""
    lines = ["Two linear layers are one"]
    for key, value in values["linear_collapse"].items():
        lines.append(f"  {key}: {fmt_values(value)}")
    lines.append("The eight activations at z = -1.5, 0, 0.5")
    for spec, entry in values["activations"].items():
        lines.append(f"  {spec}: values {fmt_values(entry['values'])}; slopes {fmt_values(entry['slopes'])}")
    for key, title in (("chain_sigmoid", "sigmoid"), ("chain_relu", "ReLU"),
                       ("chain_relu_dead", "ReLU, second bias -2")):
        entry = values[key]
        lines.append(f"The error through a chain of four units ({title})")
        for name in ("net_inputs", "activations", "slopes", "errors", "weight_gradients"):
            lines.append(f"  {name} (layer 1..4): {fmt_values(entry[name])}")
        lines.append(f"  cost: {fmt_values(entry['cost'])}; first-layer error / output error: "
                     f"{fmt_values(entry['first_over_output_error'])}")
    lines.append("Initial scales of one layer")
    for scheme, entry in values["initial_scales"].items():
        lines.append(f"  {scheme}: " + ", ".join(f"{k} {fmt_values(v)}" for k, v in entry.items()))
    return "\n".join(lines)
