"""The ``gated-ffn`` figure: val loss, tokens/s and peak memory per variant."""

from __future__ import annotations

import numpy as np

from actlab.experiments.gated_ffn.summary import nan_to_zero
from actlab.plotting import pyplot
from actlab.runner.experiment import RunContext


def draw(summary: dict, ctx: RunContext) -> None:
    """Save ``gated_ffn``: three bar panels, plain FFNs blue, gated orange."""
    plt = pyplot()

    names = list(summary["variants"])
    v = summary["variants"]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    panels = (("val loss (mean ± sd)", [v[n]["val_loss"]["mean"] for n in names],
               [nan_to_zero(v[n]["val_loss"]["sd"]) for n in names]),
              ("tokens / s", [v[n]["tokens_per_s"] for n in names], None),
              ("peak step memory (MiB)", [v[n]["peak_memory_mb"] for n in names], None))
    for ax, (label, values, errors) in zip(axes, panels):
        colors = ["tab:blue" if v[n]["ffn"] == "plain" else "tab:orange" for n in names]
        ax.bar(range(len(names)), values, yerr=errors, color=colors)
        ax.set_xticks(range(len(names)), names)
        ax.set_ylabel(label)
        finite = [x for x in values if np.isfinite(x)]
        if label.startswith("val") and finite:
            ax.set_ylim(min(finite) - 0.05, max(finite) + 0.05)
    fig.suptitle(f"matched parameters; selected: {summary['selected']}")
    fig.tight_layout()
    ctx.save_figure(fig, "gated_ffn")
