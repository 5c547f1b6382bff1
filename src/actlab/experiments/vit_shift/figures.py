"""The ``vit-shift`` figures: Fig. 6 residuals, Fig. 7(a) hidden-state means, raw curves."""

from __future__ import annotations

import pandas as pd

from actlab import analysis
from actlab.experiments.vit_shift.summary import PREFIX
from actlab.runner.experiment import RunContext


def draw_figures(table: pd.DataFrame, depth: int, ctx: RunContext) -> None:
    """Fig. 6 residuals, Fig. 7(a) hidden-state means per block, and the raw curves."""
    plt = analysis.pyplot()
    if table.empty:
        return
    fig, axes = plt.subplots(1, 3, figsize=(15, 3.8))
    for ax, (metric, label) in zip(axes, (("train_loss", "training-loss residual"),
                                          ("test_loss", "test-loss residual"),
                                          ("test_accuracy", "test-accuracy residual"))):
        residual = analysis.paired_residual(table, metric, PREFIX)
        if residual.empty:
            continue
        analysis.plot_residual(ax, residual)
        ax.set_title(f"{label} (shifted - unshifted)", fontsize=9)
    ctx.save_figure(fig, "fig6_residuals")

    fig, axes = plt.subplots(2, depth, figsize=(3.4 * depth, 6.4), squeeze=False)
    for block in range(depth):
        analysis.plot_pair_curves(axes[0, block], table, PREFIX, "hidden_mean", f"block{block}")
        axes[0, block].set_title(f"hidden-state mean after block {block}", fontsize=9)
        analysis.plot_pair_curves(axes[1, block], table, PREFIX, "act_mean", f"act{block}")
        axes[1, block].set_title(f"MLP post-activation mean, block {block}", fontsize=9)
    axes[0, 0].legend(fontsize=7)
    ctx.save_figure(fig, "fig7a_hidden_mean")

    fig, axes = plt.subplots(1, 3, figsize=(15, 3.8))
    for ax, metric in zip(axes, ("train_loss", "test_loss", "test_accuracy")):
        analysis.plot_pair_curves(ax, table, PREFIX, metric)
        ax.set_ylabel(metric.replace("_", " "))
        if "loss" in metric:
            ax.set_yscale("log")
    axes[0].legend(fontsize=7)
    ctx.save_figure(fig, "vit_curves")
