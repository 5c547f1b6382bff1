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
    _draw_inputs(summary, ctx)
    _draw_arms(summary, ctx)


def _draw_inputs(summary: dict, ctx: RunContext) -> None:
    """Save ``spikes_inputs``: per layer, the up-projection input's max and min (symmetric,
    moderate) against the down-projection input's max (one-sided), as App. B.3.1's Table 8."""
    plt = pyplot()
    acts = {k: v for k, v in summary["activations"].items() if v.get("inputs", {}).get("up_in_max")}
    if not acts:
        return
    fig, axes = plt.subplots(1, len(acts), figsize=(2.6 * len(acts), 3.4), sharey=True,
                             squeeze=False)
    for ax, (spec, s) in zip(axes[0], acts.items()):
        inputs = s["inputs"]
        layers = sorted(inputs["up_in_max"], key=int)
        x = [int(k) for k in layers]
        ax.plot(x, [inputs["down_in_max"][k] for k in layers], "o-", label="down-proj. in, max")
        ax.plot(x, [inputs["up_in_max"][k] for k in layers], "s--", label="up-proj. in, max")
        ax.plot(x, [-inputs["up_in_min"][k] for k in layers], "v:", label="up-proj. in, -min")
        ax.set(title=spec, xlabel="layer", yscale="log")
    axes[0][0].set(ylabel="value (mean over seeds)")
    axes[0][0].legend(fontsize=6)
    fig.tight_layout()
    ctx.save_figure(fig, "spikes_inputs")


def _draw_arms(summary: dict, ctx: RunContext) -> None:
    """Save ``spikes_arms`` when an arm ran: per norm, each activation's largest range (mean
    over seeds, each seed a dot; Fig. 6), and the depth arm's range per block (mean over seeds)
    with the first third of the blocks shaded (what the location claim calls early)."""
    norms, depth = summary.get("norms"), summary.get("depth")
    if not norms and not depth:
        return
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), squeeze=False)
    left, right = axes[0]
    if norms:
        names = list(norms["arms"])
        specs = list(dict.fromkeys(s for acts in norms["arms"].values() for s in acts))
        width = 0.8 / max(len(specs), 1)
        for j, spec in enumerate(specs):
            for i, norm in enumerate(names):
                arm = norms["arms"][norm].get(spec)
                if not arm:
                    continue
                x = i + (j - (len(specs) - 1) / 2) * width
                left.bar(x, arm["largest_range_mean"], width, color=f"C{j}",
                         label=spec if i == 0 else None)
                seeds = list(arm["largest_range_per_seed"].values())
                left.plot([x] * len(seeds), seeds, "k.", ms=4)
        left.set_xticks(range(len(names)), names, rotation=15, ha="right", fontsize=8)
        left.set(yscale="log", ylabel="largest down-projection input range")
        left.legend(fontsize=7)
    if depth:
        right.axvspan(0.5, depth["n_layer"] / 3 + 0.5, color="0.9")
        for spec, arm in depth["activations"].items():
            layers = sorted(arm["range_mean"], key=int)
            right.plot([int(k) + 1 for k in layers], [arm["range_mean"][k] for k in layers],
                       marker="o", label=spec)
        right.set(yscale="log", xlabel=f"block ({depth['n_layer']} x {depth['n_embd']})",
                  ylabel="down-projection input range (mean over seeds)")
        right.legend(fontsize=7)
    fig.tight_layout()
    ctx.save_figure(fig, "spikes_arms")
