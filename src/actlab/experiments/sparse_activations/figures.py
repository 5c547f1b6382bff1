"""The ``sparse-activations`` figure: accuracy (the GPT: loss) and sparsity per activation, one
line per setup."""

from __future__ import annotations

from typing import Any

import numpy as np

from actlab.plotting import pyplot
from actlab.runner.experiment import RunContext


def draw_figures(cells: dict[str, Any], activations: list[str], ctx: RunContext) -> None:
    """``sparse_activations``: the summary's table of cells as line plots (accuracy, sparsity
    and, with a GPT setup, its validation loss)."""
    plt = pyplot()
    panels = [("accuracy_mean", "test accuracy"), ("sparsity_mean", "sparsity (|a| < 1e-7)")]
    if any(c["test_loss_mean"] is not None for row in cells.values() for c in row.values()):
        panels.append(("test_loss_mean", "GPT validation loss"))
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 3.8))
    xs = np.arange(len(activations))
    for setup, row in cells.items():
        for ax, (key, _title) in zip(axes, panels):
            values = [np.nan if row[a][key] is None else row[a][key] for a in activations]
            if not np.all(np.isnan(values)):
                ax.plot(xs, values, "o-", label=setup)
    for ax, (_key, title) in zip(axes, panels):
        ax.set_xticks(xs)
        ax.set_xticklabels(activations, rotation=45, ha="right", fontsize=7)
        ax.set_title(title)
    labelled = [ax for ax in axes if ax.get_legend_handles_labels()[0]]
    if labelled:
        labelled[0].legend(fontsize=7)
    ctx.save_figure(fig, "sparse_activations")
