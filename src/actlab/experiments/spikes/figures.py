"""The ``spikes`` figure: range per layer (log scale) and final validation loss."""

from __future__ import annotations

import numpy as np

from actlab.plotting import pyplot
from actlab.runner.experiment import RunContext


def draw(summary: dict, ctx: RunContext) -> None:
    """Save ``spikes``: max range over seeds per layer, and val loss mean ± sd."""
    plt = pyplot()

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8))
    for spec, s in summary["activations"].items():
        layers = sorted(s["max_range"], key=int)
        left.plot([int(k) for k in layers], [s["max_range"][k] for k in layers], marker="o",
                  label=spec)
    left.set(yscale="log", xlabel="layer", ylabel="down-projection input range (max over seeds)")
    left.legend(fontsize=7)
    names = list(summary["activations"])
    means = [summary["activations"][n]["val_loss"]["mean"] for n in names]
    sds = [summary["activations"][n]["val_loss"]["sd"] for n in names]
    right.bar(range(len(names)), means, yerr=[0 if not np.isfinite(v) else v for v in sds])
    right.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
    finite = [m for m in means if np.isfinite(m)]
    if finite:
        right.set_ylim(min(finite) - 0.05, max(finite) + 0.05)
    right.set(ylabel="final validation loss (mean ± sd)")
    fig.tight_layout()
    ctx.save_figure(fig, "spikes")
