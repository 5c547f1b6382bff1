"""The handbook results the ``init-study`` compares with, and its claims."""

from __future__ import annotations

import math

from actlab.runner.claims import claim_id
from actlab.runner.experiment import Claim

# The handbook's results (seed 001): verdict, late cost per seed, mean test accuracy.
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
    out = []
    comparable = summary["protocol"]["comparable_with_handbook"]
    for name in PUBLISHED:  # the configurations in their published order
        if name not in summary:
            continue
        entry = summary[name]
        published = PUBLISHED[name]
        late = ", ".join("overflow" if c is None else f"{c:.4f}" for c in entry["late_costs"])
        acc = entry["test_accuracy"]
        text = f"{name}: {published[0]}"
        if published[1]:
            text += f" (late costs {', '.join(f'{c:.4f}' for c in published[1])}, test accuracy {published[2]:.4f})"
        measured = f"{entry['verdict']} (late costs {late}; test accuracy " + (
            "n/a" if acc is None else f"{acc:.4f}") + ")"
        held = entry["verdict"] == published[0] if comparable else None
        if not comparable:
            measured += " [shortened protocol: not comparable]"
        out.append(Claim(text, measured, held, "seed 001, The sample project",
                         id=claim_id("init-study", name, "verdict-matches-handbook"),
                         value=acc, comparison="compound"))
    out.extend(gradient_claims(summary))
    return out


def gradient_claims(summary: dict) -> list[Claim]:
    """First-layer weight-gradient norms before training (seed 0) against the handbook's."""
    src = "seed 001, The sample project (gradient norms before training)"
    needed = ("relu-he", "relu-xavier", "relu-default", "relu-1.41he", "sigmoid-xavier",
              "silu-he", "silu-gain1.68")
    if any(name not in summary for name in needed):
        return []
    first = {name: summary[name]["grad_norms_before_seed0"][0] for name in needed}
    he = first["relu-he"]

    def within(value: float, target: float, factor: float) -> bool:
        return math.isfinite(value) and target / factor <= value <= target * factor

    rows = [
        ("sigmoid-xavier", "sigmoid+Xavier first-layer norm 7.35e-14 (within 10x)",
         first["sigmoid-xavier"], 7.35e-14, 10),
        ("relu-he", "ReLU+He first-layer norm 0.102 (within 3x)", he, 0.102, 3),
        ("relu-xavier", "ReLU Xavier / He first-layer norm ~ 2^-10 (within 3x)",
         first["relu-xavier"] / he, 2.0**-10, 3),
        ("relu-default", "ReLU default / He ~ 6^-10 = 1.65e-8 (within 10x)",
         first["relu-default"] / he, 6.0**-10, 10),
        ("relu-1.41he", "ReLU 1.41xHe / He ~ 2^10, about 1,900 in the handbook (within 3x of "
         "2^10)", first["relu-1.41he"] / he, 2.0**10, 3),
        ("silu-he", "SiLU+He starts four orders of magnitude below SiLU with its fixed-point "
         "gain (ratio within 10x of 1e-4)", first["silu-he"] / first["silu-gain1.68"], 1e-4, 10),
    ]
    return [Claim(text, f"{value:.3g}", within(value, target, factor), src,
                  id=claim_id("init-study", name, "first-layer-gradient-norm"), value=value,
                  comparison="within-factor", threshold=factor, reference=target)
            for name, text, value, target, factor in rows]
