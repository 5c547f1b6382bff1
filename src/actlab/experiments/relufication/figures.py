"""The ``relufication`` figure: accuracy and sparsity per model before, at and after the swap."""

from __future__ import annotations

from typing import Any

import numpy as np

from actlab.experiments.relufication.summary import PHASES
from actlab.plotting import pyplot
from actlab.runner.experiment import RunContext


def draw_figures(models: dict[str, Any], ctx: RunContext) -> None:
    """``relufication``: grouped bars of test accuracy and sparsity, one group per model."""
    plt = pyplot()

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    names = list(models)
    xs = np.arange(len(names))
    for i, phase in enumerate(PHASES):
        acc = [models[n][f"{phase}_accuracy"] or np.nan for n in names]
        sp = [models[n][f"{phase}_sparsity"] or np.nan for n in names]
        axes[0].bar(xs + (i - 1) * 0.27, acc, 0.27, label=phase)
        axes[1].bar(xs + (i - 1) * 0.27, sp, 0.27, label=phase)
    for ax, title in zip(axes, ("test accuracy", "post-activation sparsity")):
        ax.set_xticks(xs)
        ax.set_xticklabels(names)
        ax.set_title(title)
    axes[0].legend(fontsize=7)
    ctx.save_figure(fig, "relufication")
