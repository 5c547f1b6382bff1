"""The ``pretrained-profile`` summary: per-layer statistics and the range over layers."""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np


def build_summary(table: Any, results: list[dict]) -> dict:
    """Per-layer statistics, range max/median over layers, hidden means, negative share."""
    layers: dict[str, dict[str, float]] = {}
    for row in table.itertuples():
        layers.setdefault(str(row.layer), {})[row.metric] = float(row.value)
    order = sorted(layers, key=int)
    ranges = [layers[k]["down_input_range"] for k in order]
    median = statistics.median(ranges)
    peak = int(np.argmax(ranges))
    summary = {**results[0]["data"], "layers": {k: layers[k] for k in order},
               "down_proj_input_range": dict(zip(order, ranges)),
               "range_max_over_median": max(ranges) / median if median > 0 else float("nan"),
               "range_max_layer": peak,
               "hidden_means": [layers[k].get("hidden_mean", float("nan")) for k in order],
               "massive_ratios": [layers[k].get("massive_ratio", float("nan")) for k in order],
               "mean_preact_neg_frac": statistics.fmean(layers[k]["preact_neg_frac"] for k in order)}
    return summary
