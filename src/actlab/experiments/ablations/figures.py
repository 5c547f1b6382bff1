"""Fig. 14 of "Rethinking Activation Functions": the pair's loss curves under each variant."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from actlab.analysis import plot_pair_curves
from actlab.plotting import pyplot

if TYPE_CHECKING:
    from actlab.experiments.ablations import Config
    from actlab.runner.experiment import RunContext


def ablations_figure(config: Config, table: Any, variants: list[str], ctx: RunContext) -> None:
    """One panel of unshifted and shifted eval-loss curves per variant."""
    plt = pyplot()
    n = max(1, len(variants))
    fig, axes = plt.subplots(1, n, figsize=(4 * n, 3.6), squeeze=False)
    for ax, variant in zip(axes[0], variants):
        plot_pair_curves(ax, table, variant)
        ax.set_title(variant.replace("_", " "))
    axes[0, 0].set_ylabel("eval loss")
    axes[0, 0].legend()
    fig.suptitle(f"Fig. 14: {config.activation} students under ablations")
    ctx.save_figure(fig, "fig14_ablations")
