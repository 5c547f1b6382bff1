"""The ``init-study`` figures: cost curves per configuration, gradient norms before training."""

from __future__ import annotations

from actlab.experiments.init_study.summary import LN2
from actlab.plotting import pyplot
from actlab.runner.experiment import RunContext


def init_study_figures(summary: dict, table, configurations: list[str], ctx: RunContext) -> None:
    """Cost curves per configuration and the weight-gradient norms before training."""
    plt = pyplot()
    names = [name for name in configurations if name in summary]
    fig, axes = plt.subplots(2, 5, figsize=(20, 7), sharex=True, sharey=True)
    for ax, name in zip(axes.ravel(), names):
        rows = table[(table["run"] == name) & (table["metric"] == "cost")]
        for i, (seed, sel) in enumerate(rows.groupby("seed")):
            sel = sel.sort_values("step")
            ax.plot(sel["step"], sel["value"].clip(upper=5.0), color=f"C{i}", lw=0.8,
                    label=f"seed {seed}")
        ax.axhline(LN2, color="k", ls=":", lw=0.8)
        ax.axhline(LN2 / 2, color="k", ls="--", lw=0.8)
        ax.set_title(f"{name}: {summary[name]['verdict']}", fontsize=9)
        if summary[name]["verdict"] == "diverges":
            start = [c for c in summary[name]["initial_cost"] if c is not None]
            ax.text(0.5, 0.5, "cost overflowed\n(initial cost " + ", ".join(
                f"{c:.4g}" for c in start) + ")", transform=ax.transAxes, ha="center",
                fontsize=8)
        ax.set_ylim(0, 1.5)
    axes[0, 0].legend(fontsize=7)
    for ax in axes[1]:
        ax.set_xlabel("epoch")
    ctx.save_figure(fig, "init_study_costs")

    fig, ax = plt.subplots(figsize=(8, 5))
    for i, name in enumerate(names):
        grads = summary[name]["grad_norms_before_seed0"]
        ax.semilogy(range(1, len(grads) + 1), grads, color=f"C{i % 10}",
                    ls="-" if i < 10 else "--", label=name)
    ax.set_xlabel("layer (21 = output)")
    ax.set_ylabel("weight-gradient norm before training")
    ax.legend(fontsize=7)
    ctx.save_figure(fig, "init_study_gradients")
