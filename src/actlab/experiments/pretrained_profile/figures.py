"""The ``pretrained-profile`` figure: range, shares and hidden-state mean per layer."""

from __future__ import annotations

import numpy as np

from actlab.plotting import pyplot
from actlab.runner.experiment import RunContext


def draw(summary: dict, ctx: RunContext) -> None:
    """Save ``pretrained_profile``: three panels over the layers."""
    plt = pyplot()

    layers = summary["layers"]
    order = list(layers)
    x = [int(k) for k in order]
    fig, (left, mid, right) = plt.subplots(1, 3, figsize=(13, 3.6))
    left.bar(x, [layers[k]["down_input_range"] for k in order])
    left.set(xlabel="layer", ylabel="down-projection input range",
             title=f"max/median {summary['range_max_over_median']:.2f}")
    for key in ("preact_neg_frac", "below_1e-2", "below_1e-3", "sparsity"):
        mid.plot(x, [layers[k].get(key, np.nan) for k in order], marker="o", label=key)
    mid.set(xlabel="layer", ylabel="share", ylim=(-0.02, 1.02))
    mid.legend(fontsize=7)
    right.plot(x, summary["hidden_means"], marker="o")
    right.set(xlabel="layer", ylabel="hidden-state mean")
    fig.tight_layout()
    ctx.save_figure(fig, "pretrained_profile")
