"""The ``dit-percentile`` figures: sample grids, FID over training, residuals to LayerNorm,
hidden-state means and the speed ratios."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from actlab import analysis
from actlab.experiments.dit_common import (
    DIGITS_NETWORK,
    draw_fid_curves,
    draw_hidden_means,
    draw_residuals,
    draw_sample_grids,
    feature_network,
    model_depth,
)
from actlab.experiments.dit_percentile.summary import PREFIX, conditions
from actlab.runner.experiment import RunContext

if TYPE_CHECKING:
    from actlab.experiments.dit_percentile import DiTPercentileConfig


def draw_figures(
    config: DiTPercentileConfig,
    table: pd.DataFrame,
    results: list[dict[str, Any]],
    summary: dict[str, Any],
    ctx: RunContext,
) -> None:
    """``samples``, ``fid``, ``loss_residuals``, ``hidden_means`` and ``speed``."""
    if table.empty:
        return
    runs = [f"{PREFIX}/{c}" for c in conditions(config)]
    network = feature_network(config) or DIGITS_NETWORK  # every figure names its network
    draw_sample_grids(results, runs, ctx)
    draw_fid_curves(table, runs, ctx, network=network)
    draw_residuals(table, runs, f"{PREFIX}/layernorm", ctx, network=network)
    draw_hidden_means(table, runs, model_depth(config), ctx)
    entries = summary.get("conditions", {})
    base = entries.get("layernorm", {})
    names = [c for c in entries if "steps_per_s" in entries[c]]
    if not names or not base.get("steps_per_s"):
        return
    plt = analysis.pyplot()
    fig, ax = plt.subplots(figsize=(max(5, 0.9 * len(names)), 3.6))
    xs = np.arange(len(names))
    for offset, key, label in (
        (-0.2, "steps_per_s_warmup", "during warm-up"),
        (0.2, "steps_per_s", "after warm-up"),
    ):
        ax.bar(
            xs + offset,
            [entries[n].get(key, np.nan) / base.get(key, np.nan) for n in names],
            width=0.4,
            label=label,
        )
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(xs, names, rotation=30, fontsize=7, ha="right")
    ax.set_title("steps/s relative to LayerNorm (engine step clock)", fontsize=9)
    ax.legend(fontsize=7)
    ctx.save_figure(fig, "speed")
