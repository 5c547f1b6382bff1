"""The handbook results the ``init-study`` compares with, and its claims.

The results are those of the sample project of the handbook page "Activations and
initialization" (its part "The code"): each configuration's verdict, late costs and test
accuracy, and the weight-gradient norms before training.
"""

from __future__ import annotations

from actlab.runner.claims import ClaimSpec, among, claim_id, judge_all, within_factor
from actlab.runner.experiment import Claim

NAME = "init-study"
WHERE = "The code, The sample project"
WHERE_GRADIENTS = "The code, The sample project, gradient norms before training"

# The handbook's results: verdict, late cost per seed, mean test accuracy.
PUBLISHED = {
    "relu-default": ("stalls at chance", (0.6931, 0.6931, 0.6931), 0.5000),
    "relu-xavier": ("learns slowly", (0.6313, 0.6931, 0.5812), 0.5989),
    "relu-he": ("trains", (0.3439, 0.1978, 0.1237), 0.8956),
    "relu-1.41he": ("diverges", None, None),
    "sigmoid-xavier": ("stalls at chance", (0.6932, 0.6932, 0.6931), 0.5000),
    "tanh-xavier": ("learns slowly", (0.6026, 0.4312, 0.3785), 0.6922),
    "tanh-xavier-5/3": ("trains", (0.3068, 0.0424, 0.0836), 0.8344),
    "elu-he": ("trains", (0.0636, 0.0382, 0.0560), 0.9311),
    "silu-he": ("learns slowly", (0.6922, 0.3559, 0.3263), 0.6600),
    "silu-gain1.68": ("trains", (0.1215, 0.0331, 0.0330), 0.9344),
}


def claims(summary: dict) -> list[Claim]:
    """One claim per configuration (our verdict against the handbook's), then the gradient norms."""
    comparable = summary["protocol"]["comparable_with_handbook"]
    undecided = "" if comparable else "shortened protocol: not comparable with the handbook's"
    specs = []
    for name, (verdict, costs, accuracy) in PUBLISHED.items():  # in their published order
        if name not in summary:
            continue
        entry = summary[name]
        n = {"verdict": verdict, "measured_verdict": entry["verdict"],
             "late": ", ".join("overflow" if c is None else f"{c:.4f}"
                               for c in entry["late_costs"]),
             "accuracy": entry["test_accuracy"]}
        text, quoted = name + ": {verdict}", ()
        if costs:  # the published late costs and accuracy, for comparison (not judged)
            n.update({f"cost{i}": c for i, c in enumerate(costs, start=1)},
                     published_accuracy=accuracy)
            text += (" (late costs " + ", ".join(f"{{cost{i}:.4f}}" for i in range(1, 4))
                     + ", test accuracy {published_accuracy:.4f})")
            quoted = ("cost1", "cost2", "cost3", "published_accuracy")
        specs.append(ClaimSpec(
            id=claim_id(NAME, name, "verdict-matches-handbook"), text=text,
            measured="{measured_verdict} (late costs {late}; test accuracy {accuracy:.4f})",
            check=among(entry["verdict"], (verdict,)), source="handbook", where=WHERE,
            numbers=n, quoted=quoted, undecided_because=undecided))
    specs.extend(gradient_specs(summary))
    return judge_all(specs)


def gradient_specs(summary: dict) -> list[ClaimSpec]:
    """First-layer weight-gradient norms before training (seed 0) against the handbook's."""
    needed = ("relu-he", "relu-xavier", "relu-default", "relu-1.41he", "sigmoid-xavier",
              "silu-he", "silu-gain1.68")
    if any(name not in summary for name in needed):
        return []
    first = {name: summary[name]["grad_norms_before_seed0"][0] for name in needed}
    he = first["relu-he"]
    # (configuration, text, measured number, factor (ours), the handbook's numbers, and the
    # reference: the name of one of them, or the rule the handbook states it as (2^-10, 6^-10,
    # 2^10, "four orders of magnitude") where it writes no number)
    rows = [
        ("sigmoid-xavier", "sigmoid+Xavier first-layer norm {published:.3g} (within {factor:g}x)",
         first["sigmoid-xavier"], 10, {"published": 7.35e-14}, "published"),
        ("relu-he", "ReLU+He first-layer norm {published:.3g} (within {factor:g}x)", he, 3,
         {"published": 0.102}, "published"),
        ("relu-xavier", "ReLU Xavier / He first-layer norm ~ 2^-10 = {reference:.3g} (the "
         "handbook: {xavier:.3g} against {he:.3g}; within {factor:g}x)",
         first["relu-xavier"] / he, 3, {"xavier": 1.11e-4, "he": 0.102}, 2.0**-10),
        ("relu-default", "ReLU default / He ~ 6^-10 = {reference:.3g} (the handbook: "
         "{default:.3g}, {ratio:.2g} of He's; within {factor:g}x)",
         first["relu-default"] / he, 10, {"default": 1.36e-9, "ratio": 1.3e-8}, 6.0**-10),
        ("relu-1.41he", "ReLU 1.41xHe / He ~ 2^10 (the handbook: {big:g}, about {ratio:,.0f} "
         "times He's; within {factor:g}x of 2^10)",
         first["relu-1.41he"] / he, 3, {"big": 196, "ratio": 1900}, 2.0**10),
        ("silu-he", "SiLU+He starts four orders of magnitude below SiLU with its fixed-point "
         "gain (ratio within {factor:g}x of {reference:.0e})",
         first["silu-he"] / first["silu-gain1.68"], 10, {}, 1e-4),
    ]
    specs = []
    for name, text, value, factor, published, reference in rows:
        reference = published[reference] if isinstance(reference, str) else reference
        n = {"value": value, "reference": reference, "factor": factor, **published}
        specs.append(ClaimSpec(
            id=claim_id(NAME, name, "first-layer-gradient-norm"), text=text,
            measured="{value:.3g}", check=within_factor(value, reference, factor),
            source="handbook", where=WHERE_GRADIENTS, numbers=n, quoted=tuple(published)))
    return specs
