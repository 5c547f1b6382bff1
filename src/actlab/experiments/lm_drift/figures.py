"""The ``lm-drift`` figure: the four trajectories per arm, mean over blocks and seeds."""

from __future__ import annotations

from typing import Any

from actlab.plotting import pyplot
from actlab.runner.experiment import RunContext

PANELS = (("w_mean", "up-projection weight mean"), ("z_score", "drift Z-score"),
          ("mean_drift_share", "|mean change| / mean |change|"),
          ("preact_neg_frac", "negative pre-activation share"), ("sparsity", "sparsity"))


def draw(table: Any, config: Any, ctx: RunContext) -> None:
    """Save ``lm_drift``: one panel per trajectory, one line per optimizer/activation arm."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(PANELS), figsize=(3.6 * len(PANELS), 3.4))
    for ax, (metric, title) in zip(axes, PANELS):
        rows = table[table.metric == metric]
        for run in sorted(rows.run.unique()):
            curve = rows[rows.run == run].groupby("step").value.mean()
            style = "-" if run.startswith("muon") else "--"
            ax.plot(curve.index, curve.values, style, label=run)
        ax.set(title=title, xlabel="step")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    ctx.save_figure(fig, "lm_drift")
