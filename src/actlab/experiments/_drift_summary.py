"""Summary and figures of the ``drift`` experiment, read by typed run keys.

Every trained condition has a :class:`DriftRun` key; its ``name`` is the ``run`` column of the
tidy table, so the summary looks runs up by key and never parses names back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from actlab.analysis import at_step, change_per_layer, finite_or_none, layer_number, mean_value
from actlab.experiments._drift_config import DriftConfig
from actlab.plotting import pyplot
from actlab.probe.plots import plot_layer_means
from actlab.runner.experiment import RunContext


@dataclass(frozen=True)
class DriftRun:
    """Typed key of one trained condition; ``name`` is its ``run`` in the tidy table."""

    condition: str
    activation: str
    optimizer: str = ""
    lr: float = 0.0

    @classmethod
    def of(cls, unit: dict[str, Any]) -> DriftRun:
        """The key of a unit (optimizer and lr matter only for sweep points)."""
        if unit["condition"] == "sweep":
            return cls("sweep", unit["activation"], unit["optimizer"], unit["lr"])
        return cls(unit["condition"], unit["activation"])

    @property
    def setting(self) -> str:
        """``optimizer:lr`` of a sweep point, e.g. ``adam:0.001``."""
        return f"{self.optimizer}:{self.lr:g}"

    @property
    def name(self) -> str:
        """``main/relu`` or ``sweep/relu/adam:0.001``."""
        suffix = f"/{self.setting}" if self.condition == "sweep" else ""
        return f"{self.condition}/{self.activation}{suffix}"


def run_name(unit: dict[str, Any]) -> str:
    """Tidy-table run name of a unit, e.g. ``main/relu`` or ``sweep/relu/adam:0.001``."""
    return DriftRun.of(unit).name


def drift_summary(config: DriftConfig, runs: dict[str, pd.DataFrame], results: list[dict[str, Any]],
                  sweep_keys: list[DriftRun]) -> dict:
    """``summary.json`` of a drift run from its rows per run name and its sweep points."""
    last_hidden = config.depth + 1
    summary: dict[str, Any] = {
        "scale": {"steps": config.steps,
                  "seeds": sorted({int(s) for rows in runs.values() for s in rows["seed"]}),
                  "hidden": config.hidden, "depth": config.depth, "batch_size": config.batch_size,
                  "random_pairs": config.n_random,
                  "optimizer": f"{config.optimizer} lr={config.lr}",
                  "init": config.init, "compare_init": config.compare_init},
        "failed_units": [r["unit"] for r in results if r["status"] != "ok"],
    }
    per_act: dict[str, Any] = {}
    for act in config.activations:
        main = runs.get(DriftRun("main", act).name)
        entry = {} if main is None else describe_run(main, last_hidden)
        for cond in ("default-init", "skip", "digits"):
            other = runs.get(DriftRun(cond, act).name)
            if other is not None:
                described = describe_run(other, last_hidden)
                entry[cond] = {k: described[k] for k in CONDITION_KEYS if k in described}
        if entry:
            per_act[act] = entry
    # Paired comparison with ReLU: identical losses would mean the activation trains as ReLU.
    relu_loss = _loss_curve(runs.get(DriftRun("main", "relu").name))
    for act, entry in per_act.items():
        curve = _loss_curve(runs.get(DriftRun("main", act).name))
        if act != "relu" and relu_loss is not None and curve is not None:
            joined = pd.concat([relu_loss, curve], axis=1, join="inner").dropna()
            gap = (joined.iloc[:, 1] - joined.iloc[:, 0]).abs().mean()
            entry["loss_gap_vs_relu"] = finite_or_none(float(gap / joined.iloc[:, 0].abs().mean()))
    summary["activations"] = per_act
    sweep: dict[str, dict[str, Any]] = {}
    points = _sweep_points(config, runs, sweep_keys)
    # A seed that diverged leaves rows up to its divergence (drift near 0): leave it out.
    diverged = {(DriftRun.of(r["unit"]).name, int(seed)) for r in results
                if r["status"] == "diverged" for seed in r["seeds"]}
    for key, rows in sorted(points.items(), key=lambda kv: kv[0].name):
        lost = [(run, int(seed)) in diverged for run, seed in zip(rows["run"], rows["seed"])]
        n_lost = len({int(seed) for seed, gone in zip(rows["seed"], lost) if gone})
        rows = rows[[not gone for gone in lost]]
        if rows.empty:
            sweep.setdefault(key.activation, {})[key.setting] = {
                "drift_z_final": None, "drift_z_early": None, "mean_shift_later_layers": None,
                "final_loss": None, "diverged_seeds": n_lost}
            continue
        depth = rows["layer"].map(layer_number)
        z = rows[(rows["metric"] == "drift_z") & (depth >= 2) & (depth <= last_hidden)]
        early = z[z["step"] == min(config.record_every, config.steps)]
        d = describe_run(rows, last_hidden)
        sweep.setdefault(key.activation, {})[key.setting] = {
            "drift_z_final": mean_value(at_step(z)) if len(z) else None,
            "drift_z_early": mean_value(early),
            "mean_shift_later_layers": d["mean_shift_later_layers"], "final_loss": d["final_loss"],
            "diverged_seeds": n_lost}
    summary["sweep"] = sweep
    return summary


def _sweep_points(config: DriftConfig, runs: dict[str, pd.DataFrame],
                  keys: list[DriftRun]) -> dict[DriftRun, pd.DataFrame]:
    """Rows of each sweep point that ran; the point equal to ``main`` reads the main run."""
    points = {k: runs[k.name] for k in keys if k.name in runs}
    if "sweep" in config.conditions:
        for act in config.sweep_activations:
            if DriftRun("main", act).name in runs:
                key = DriftRun("sweep", act, config.optimizer, config.lr)
                points[key] = runs[DriftRun("main", act).name]
    return points


def drift_figures(config: DriftConfig, runs: dict[str, pd.DataFrame], sweep_keys: list[DriftRun],
                  ctx: RunContext) -> None:
    """Per-layer trajectories per condition, and the drift Z-score of the sweep points."""
    plt = pyplot()
    for cond in ("main", "default-init", "skip", "digits"):
        acts = [a for a in config.activations if DriftRun(cond, a).name in runs]
        if not acts:
            continue
        fig, axes = plt.subplots(3, len(acts), figsize=(3.2 * len(acts), 8), squeeze=False)
        for j, act in enumerate(acts):
            for i, metric in enumerate(("weight_mean", "preact_grad_mean", "sparsity")):
                plot_layer_means(axes[i, j], runs[DriftRun(cond, act).name], metric,
                                 relative=metric == "weight_mean")
                shift = " shift" if metric == "weight_mean" else ""
                axes[i, j].set_title(f"{act}: {metric}{shift}", fontsize=8)
            axes[0, j].legend(fontsize=6)
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
                rows = runs[key.name]
                depth = rows["layer"].map(layer_number)
                z = rows[(rows["metric"] == "drift_z") & (depth >= 2)
                         & (depth <= config.depth + 1)]
                curve = z.groupby("step")["value"].mean()
                ax.plot(curve.index, curve.values, label=key.setting)
            ax.set_title(act, fontsize=9)
            ax.set_xlabel("step")
            ax.legend(fontsize=7)
        axes[0, 0].set_ylabel(f"drift Z-score (layers 2..{config.depth + 1})")
        ctx.save_figure(fig, "drift_optimizers")


# Headline numbers reported for the side conditions (default-init, skip, digits).
CONDITION_KEYS = ("mean_shift_first_layer", "mean_shift_later_layers", "mean_shift_output_layer",
                  "final_sparsity", "final_neg_frac", "sparsity_start", "sparsity_end",
                  "test_accuracy")


def describe_run(df: pd.DataFrame, last_hidden: int) -> dict[str, Any]:
    """Seed-averaged headline numbers of one run's rows (see the experiment's summary)."""
    depth = df["layer"].map(layer_number)
    shifts = change_per_layer(df, "weight_mean")
    hidden_later = [v for k, v in shifts.items() if 2 <= layer_number(k) <= last_hidden]
    out: dict[str, Any] = {
        "mean_shift_first_layer": finite_or_none(shifts.get("layer1", math.nan)),
        "mean_shift_later_layers": (finite_or_none(float(np.mean(hidden_later)))
                                    if hidden_later else None),
        "mean_shift_output_layer": finite_or_none(shifts.get(f"layer{last_hidden + 1}", math.nan)),
        "mean_shift_per_layer": {k: finite_or_none(v) for k, v in
                                 sorted(shifts.items(), key=lambda kv: layer_number(kv[0]))},
    }
    hidden_sites = df[(depth >= 1) & (depth <= last_hidden)]
    grads = hidden_sites[hidden_sites["metric"] == "preact_grad_mean"]
    covs = hidden_sites[hidden_sites["metric"] == "preact_grad_cov"]
    if len(grads):
        first = grads["step"].min()
        g0 = mean_value(grads[grads["step"] == first])
        c0 = covs[covs["step"] == first]["value"].abs().mean() if len(covs) else math.nan
        out["preact_grad_mean_init"] = g0
        out["preact_grad_cov_init"] = finite_or_none(float(c0))
        out["preact_grad_mean_sign"] = None if g0 is None else int(np.sign(g0))
        out["preact_grad_mean_over_training"] = mean_value(grads)
    sp = hidden_sites[hidden_sites["metric"] == "sparsity"]
    if len(sp):
        out["sparsity_start"] = mean_value(at_step(sp, "first"))
        out["sparsity_end"] = mean_value(at_step(sp, "last"))
    for metric in ("final_sparsity", "final_neg_frac", "test_accuracy"):
        rows = df[(df["metric"] == metric) & (df["layer"] == "")]
        if len(rows):
            out[metric] = mean_value(rows)
    z = df[(df["metric"] == "drift_z") & (depth >= 2) & (depth <= last_hidden)]
    if len(z):
        out["drift_z_final"] = mean_value(at_step(z, "last"))
    loss = df[df["metric"] == "loss"].sort_values("step")
    if len(loss):
        out["final_loss"] = mean_value(loss[loss["step"] >= loss["step"].max() - 50])
    return out


def _loss_curve(rows: pd.DataFrame | None) -> pd.Series | None:
    """Per (seed, step) loss of one run's rows; ``None`` without any."""
    loss = None if rows is None else rows[rows["metric"] == "loss"]
    return None if loss is None or loss.empty else loss.set_index(["seed", "step"])["value"]
