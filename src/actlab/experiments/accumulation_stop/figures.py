"""The ``accumulation-stop`` figure: steps/s relative to LayerNorm and test accuracy."""

from __future__ import annotations

from typing import Any

import numpy as np

from actlab.plotting import pyplot
from actlab.runner.experiment import RunContext


def draw_figures(models: dict[str, Any], ctx: RunContext) -> None:
    """``accumulation_stop``: one bar per (model, norm) for the speed ratio and the accuracy."""
    plt = pyplot()

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    for i, (model, entry) in enumerate(models.items()):
        norms = list(entry)
        xs = np.arange(len(norms)) + i * (len(norms) + 1)
        axes[0].bar(xs, [entry[n].get("ratio_to_layernorm", np.nan) for n in norms])
        axes[1].bar(xs, [entry[n]["accuracy"] for n in norms])
        for ax in axes:
            for x, n in zip(xs, norms):
                ax.text(x, 0.02, f"{model}\n{n}", rotation=90, fontsize=6, ha="center", va="bottom")
    axes[0].axhline(1.0, color="k", lw=0.8)
    axes[0].set_title("steps/s relative to LayerNorm (after warm-up)")
    axes[1].set_title("test accuracy")
    ctx.save_figure(fig, "accumulation_stop")
