"""Figures of the ``drift`` experiment: per-layer trajectories and the optimizer sweep."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from actlab.experiments.drift.summary import DriftRun, runs_of
from actlab.plotting import pyplot
from actlab.probe.plots import plot_layer_means
from actlab.recipes.drift_mlp import hidden_weight_means, later_drift_z

if TYPE_CHECKING:
    from actlab.experiments.drift import DriftConfig
    from actlab.runner.experiment import RunContext


def draw_figures(config: DriftConfig, table: pd.DataFrame, sweep_keys: list[DriftRun],
                 ctx: RunContext) -> None:
    """Per-layer trajectories per condition, and the drift Z-score of the sweep points."""
    runs = runs_of(table)
    plt = pyplot()
    for cond in ("main", "default-init", "skip", "digits"):
        acts = [a for a in config.activations if DriftRun(cond, a).name in runs]
        if not acts:
            continue
        # one row per activation, one column per quantity: the grid grows downwards, so at
        # the report's width its text stays at the size it was drawn
        fig, axes = plt.subplots(len(acts), 3, figsize=(12, 2.8 * len(acts) + 0.6),
                                 squeeze=False)
        for i, act in enumerate(acts):
            for j, metric in enumerate(("weight_mean", "preact_grad_mean", "sparsity")):
                plot_layer_means(axes[i, j], runs[DriftRun(cond, act).name], metric,
                                 relative=metric == "weight_mean")
                shift = " shift" if metric == "weight_mean" else ""
                axes[i, j].set_title(f"{act}: {metric}{shift}", fontsize=10)
            axes[i, 0].legend(fontsize=8)
        fig.suptitle(f"drift, condition {cond}")
        ctx.save_figure(fig, f"drift_{cond}")
    keys = sorted(sweep_keys, key=lambda k: k.name)
    ran = [k for k in keys if k.name in runs]
    if ran:
        # One panel per activation, so that each setting keeps one colour within a panel.
        activations = sorted({k.activation for k in ran})
        fig, axes = plt.subplots(1, len(activations), figsize=(5 * len(activations), 4),
                                 sharey=True, squeeze=False)
        for ax, act in zip(axes[0], activations):
            for key in (k for k in ran if k.activation == act):
                z = later_drift_z(runs[key.name], config.depth + 1)
                curve = z.groupby("step")["value"].mean()
                ax.plot(curve.index, curve.values, label=key.setting)
            ax.set_title(act, fontsize=9)
            ax.set_xlabel("step")
            ax.legend(fontsize=7)
        axes[0, 0].set_ylabel(f"drift Z-score (layers 2..{config.depth + 1})")
        ctx.save_figure(fig, "drift_optimizers")
    draw_real_seeds(config, runs, ctx)


def draw_real_seeds(config: DriftConfig, runs: dict[str, pd.DataFrame], ctx: RunContext) -> None:
    """Real data, seed by seed: the hidden layers' mean weight shift above the training loss.

    The seeds' mean hides what decides the sign on a small training set: the drift comes in
    the learning phases (the first fit, and each loss spike after it), not in between.
    """
    panels = [(cond, act) for cond in ("digits", "digits-default-init", "digits-skip")
              for act in config.activations + config.real_extra_activations
              if DriftRun(cond, act).name in runs]
    panels = list(dict.fromkeys(panels))
    if not panels:
        return
    plt = pyplot()
    fig, axes = plt.subplots(2, len(panels), figsize=(4.5 * len(panels), 6), sharex="col",
                             squeeze=False)
    last_hidden = config.depth + 1
    for j, (cond, act) in enumerate(panels):
        rows = runs[DriftRun(cond, act).name]
        loss = rows[(rows["metric"] == "loss") & (rows["layer"] == "")]
        for seed, mean in hidden_weight_means(rows, last_hidden).items():
            line, = axes[0, j].plot(mean.index, mean.values - mean.iloc[0], label=f"seed {seed}")
            curve = loss[loss["seed"] == seed].sort_values("step")
            axes[1, j].plot(curve["step"], curve["value"], color=line.get_color(), lw=0.8)
        axes[0, j].axhline(0, color="gray", lw=0.5)
        axes[0, j].set_title(f"{cond}: {act}", fontsize=10)
        axes[1, j].set_yscale("log")
        axes[1, j].set_xlabel("step")
    axes[0, 0].set_ylabel(f"mean weight shift, layers 2..{last_hidden}")
    axes[1, 0].set_ylabel("training loss")
    axes[0, 0].legend(fontsize=7)
    fig.suptitle("real data, seed by seed: the hidden layers' drift above the training loss")
    ctx.save_figure(fig, "drift_real_seeds")
