"""The ``normalization`` experiment's summary: per-layer gradient norms of the first seed."""

from __future__ import annotations

import math
from typing import Any

# stack -> (activation, init keyword arguments)
STACKS = {"tanh-std0.01": ("tanh", {"scheme": "std", "std": 0.01}),
          "relu-2he": ("relu", {"scheme": "he", "gain": 2 * math.sqrt(2.0)})}
# variant -> (norm spec, residual)
VARIANTS = {"plain": (None, False), "batch-norm": ("batch", False),
            "layer-norm": ("layer", False), "residual": (None, True)}


def read_curves(table: Any) -> tuple[int, dict[tuple[str, str], list[float]]]:
    """The first seed and its hidden-layer gradient norms per (stack, variant), layer order."""
    seed = int(table["seed"].min())
    rows = table[(table["seed"] == seed) & (table["metric"] == "grad_norm")]
    curves = {}
    for stack in STACKS:
        for variant in VARIANTS:
            sel = rows[rows["run"] == f"{stack}/{variant}"]
            curves[(stack, variant)] = (sel.assign(l=sel["layer"].astype(int))
                                        .sort_values("l")["value"].tolist())
    return seed, curves


def build_summary(seed: int, curves: dict[tuple[str, str], list[float]]) -> dict:
    """First and last hidden layer's gradient norm per stack and variant."""
    summary: dict = {"seed": seed}
    for stack in STACKS:
        summary[stack] = {variant: {"first": curves[(stack, variant)][0],
                                    "last": curves[(stack, variant)][-1]}
                          for variant in VARIANTS}
    return summary
