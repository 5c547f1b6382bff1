"""The ``normalization`` figure: gradient norm per hidden layer, one panel per bad scale."""

from __future__ import annotations

from actlab.experiments.normalization.summary import STACKS, VARIANTS
from actlab.plotting import pyplot
from actlab.runner.experiment import RunContext


def draw_figure(curves: dict[tuple[str, str], list[float]], ctx: RunContext) -> None:
    """``figures/normalization.png``: the four variants of each stack on a log scale."""
    plt = pyplot()

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for ax, stack in zip(axes, STACKS):
        for i, variant in enumerate(VARIANTS):
            values = curves[(stack, variant)]
            ax.semilogy(range(1, len(values) + 1), values, color=f"C{i}", label=variant)
        ax.set_title(stack)
        ax.set_xlabel("hidden layer")
        ax.set_ylabel("weight-gradient norm")
        ax.legend()
    ctx.save_figure(fig, "normalization")
