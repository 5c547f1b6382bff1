"""The ``lm-shift`` figures: loss residual over training, hidden-state mean trajectories."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from actlab import analysis
from actlab.plotting import pyplot
from actlab.runner.experiment import RunContext

if TYPE_CHECKING:
    from actlab.experiments.lm_shift import LMShiftConfig


def draw(table: Any, config: LMShiftConfig, ctx: RunContext) -> None:
    """Save ``loss_residual`` and ``hidden_state_means``."""
    plt = pyplot()

    acts = config.activations
    fig, axes = plt.subplots(1, len(acts), figsize=(5 * len(acts), 3.5), squeeze=False)
    for ax, act in zip(axes[0], acts):
        for metric, style in (("train_loss", ":"), ("val_loss", "-")):
            diff = analysis.paired_residual(table, metric, act)
            if not diff.empty:
                ax.plot(diff.index, diff.mean(axis=1), style, label=metric.replace("_", " "))
        ax.axhline(0, color="grey", lw=0.8)
        ax.set(title=f"{act}: L_shifted - L_unshifted", xlabel="step", ylabel="loss residual")
        ax.legend()
    fig.tight_layout()
    ctx.save_figure(fig, "loss_residual")

    hidden = table[table.metric == "hidden_mean"]
    layers = sorted(hidden.layer.unique(), key=lambda n: int(n.split(".")[-1]))
    fig, axes = plt.subplots(len(acts), max(1, len(layers)), figsize=(3.2 * max(1, len(layers)),
                             2.8 * len(acts)), squeeze=False)
    for i, act in enumerate(acts):
        for j, layer in enumerate(layers):
            ax = axes[i][j]
            for condition, color in (("unshifted", "tab:blue"), ("shifted", "tab:red")):
                rows = hidden[(hidden.run == f"{act}/{condition}") & (hidden.layer == layer)]
                mean = rows.groupby("step").value.mean()
                ax.plot(mean.index, mean.values, color=color, label=condition)
            ax.set(title=f"{act} {layer}", xlabel="step")
            if j == 0:
                ax.set_ylabel("hidden-state mean")
                ax.legend(fontsize=7)
    fig.tight_layout()
    ctx.save_figure(fig, "hidden_state_means")
