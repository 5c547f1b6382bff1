"""The ``lm-drift`` figure: the four trajectories per arm, mean over blocks and seeds."""

from __future__ import annotations

from typing import Any

from actlab.plotting import pyplot
from actlab.runner.experiment import RunContext

PANELS = (("w_mean", "up-projection weight mean"), ("z_score", "drift Z-score"),
          ("mean_drift_share", "|mean change| / mean |change|"),
          ("down_w_mean", "down-projection weight mean"),
          ("b_mean", "up-projection bias mean"),
          ("w_mean_part", "weight mean's part of the mean pre-activation"),
          ("preact_mean", "mean pre-activation"),
          ("preact_neg_frac", "negative pre-activation share"), ("sparsity", "sparsity"))
COLUMNS = 3


def draw(table: Any, config: Any, ctx: RunContext) -> None:
    """Save ``lm_drift``: one panel per trajectory, one line per norm/optimizer/activation arm."""
    plt = pyplot()
    rows = -(-len(PANELS) // COLUMNS)
    fig, axes = plt.subplots(rows, COLUMNS, figsize=(3.6 * COLUMNS, 3.2 * rows), squeeze=False)
    for ax, (metric, title) in zip(axes.flat, PANELS):
        data = table[table.metric == metric]
        for run in sorted(data.run.unique()):
            curve = data[data.run == run].groupby("step").value.mean()
            style = "-" if "/muon/" in f"/{run}" else "--"
            ax.plot(curve.index, curve.values, style, label=run)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("step")
    for ax in axes.flat[len(PANELS):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    ctx.save_figure(fig, "lm_drift")
