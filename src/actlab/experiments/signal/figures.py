"""Figures of the ``signal`` experiment: measured and predicted profiles, activation histograms."""

from __future__ import annotations

import numpy as np

from actlab.experiments.signal.summary import HISTOGRAM_SETTINGS
from actlab.plotting import pyplot
from actlab.runner.experiment import RunContext


def draw_figures(summary: dict, results: list[dict], ctx: RunContext) -> None:
    """``signal_profiles`` (measured solid, predicted dashed) and ``signal_histograms``."""
    plt = pyplot()

    panels = (("net_input_std", "net-input std"), ("error_rms", "error size (RMS of delta)"),
              ("per_example_grad_rms", "per-example weight-gradient norm"))
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for ax, (metric, label) in zip(axes, panels):
        for i, (run, entry) in enumerate(summary["profiles"].items()):
            layers = range(1, len(entry[metric]) + 1)
            ax.semilogy(layers, entry[metric], color=f"C{i}", label=run)
            ax.semilogy(layers, entry[f"predicted_{metric}"], color=f"C{i}", ls="--")
        ax.set_xlabel("layer")
        ax.set_title(f"{label} (dashed: predicted)")
    axes[0].legend()
    ctx.save_figure(fig, "signal_profiles")

    hists = {}
    for record in results:
        hists.update(record.get("data", {}).get("histograms", {}))
    seed = summary["seed"]
    runs = [r for r in HISTOGRAM_SETTINGS if f"{r}/{seed}" in hists]
    if runs:
        fig, axes = plt.subplots(2, 3, figsize=(15, 7))
        for ax, run in zip(axes.ravel(), runs):
            entry = hists[f"{run}/{seed}"]
            edges = np.asarray(entry["edges"])
            centres = (edges[:-1] + edges[1:]) / 2
            for layer, counts in enumerate(entry["counts"], start=1):
                ax.plot(centres, counts, color=plt.cm.viridis(layer / len(entry["counts"])),
                        label=f"layer {layer}" if layer in (1, len(entry["counts"])) else None)
            ax.set_title(run)
            ax.set_yscale("symlog")
        axes[0, 0].legend()
        ctx.save_figure(fig, "signal_histograms")
