"""The ``relufy-pretrained`` figure: sparsity per layer and embedding cosine per stage."""

from __future__ import annotations

import numpy as np

from actlab.plotting import pyplot
from actlab.runner.experiment import RunContext


def draw(summary: dict, ctx: RunContext) -> None:
    """Save ``relufy``: per-layer sparsity and negative share, cosine to the original."""
    plt = pyplot()

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    for stage, s in summary["stages"].items():
        layers = sorted(s["sparsity_per_layer"], key=int)
        left.plot([int(k) for k in layers], [s["sparsity_per_layer"][k] for k in layers],
                  marker="o", label=f"{stage} sparsity")
        left.plot([int(k) for k in layers], [s["preact_neg_frac_per_layer"][k] for k in layers],
                  ls=":", label=f"{stage} negative share")
    left.set(xlabel="layer", ylabel="share", ylim=(-0.02, 1.02))
    left.legend(fontsize=6)
    names = list(summary["stages"])
    right.bar(range(len(names)), [summary["stages"][k]["cosine_to_original"] for k in names])
    right.set_xticks(range(len(names)), names)
    values = [summary["stages"][k]["cosine_to_original"] for k in names]
    right.set(ylabel="cosine to original embedding", ylim=(min(0.9, np.nanmin(values) - 0.02), 1.0))
    fig.tight_layout()
    ctx.save_figure(fig, "relufy")
