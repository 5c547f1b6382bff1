"""The ``sparse-activations`` figure: accuracy and sparsity per activation, one line per setup."""

from __future__ import annotations

from typing import Any

import numpy as np

from actlab.plotting import pyplot
from actlab.runner.experiment import RunContext


def draw_figures(cells: dict[str, Any], activations: list[str], ctx: RunContext) -> None:
    """``sparse_activations``: the summary's table of cells as two line plots."""
    plt = pyplot()

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for setup, row in cells.items():
        xs = np.arange(len(activations))
        acc = [row[a]["accuracy_mean"] if row[a]["accuracy_mean"] is not None else np.nan
               for a in activations]
        sp = [row[a]["sparsity_mean"] if row[a]["sparsity_mean"] is not None else np.nan
              for a in activations]
        axes[0].plot(xs, acc, "o-", label=setup)
        axes[1].plot(xs, sp, "o-", label=setup)
    for ax, title in zip(axes, ("test accuracy", "sparsity (|a| < 1e-7)")):
        ax.set_xticks(np.arange(len(activations)))
        ax.set_xticklabels(activations, rotation=45, ha="right", fontsize=7)
        ax.set_title(title)
    axes[0].legend(fontsize=7)
    ctx.save_figure(fig, "sparse_activations")
