"""Summary of the ``drift`` experiment, read by typed run keys.

Every trained condition has a :class:`DriftRun` key; its ``name`` is the ``run`` column of the
tidy table, so the summary looks runs up by key and never parses names back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pandas as pd

from actlab.analysis import at_step, failed_units, finite_or_none, mean_value, seeds_in
from actlab.errors import ConfigError
from actlab.recipes.drift_mlp import describe_drift, later_drift_z
from actlab.train.optim import OPTIMIZERS

if TYPE_CHECKING:
    from actlab.experiments.drift import DriftConfig


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


def parse_sweep_item(item: str) -> tuple[str, float]:
    """``"momentum:0.01"`` -> ``("momentum", 0.01)``; ``ConfigError`` on bad input."""
    opt, _, lr = item.partition(":")
    if opt not in OPTIMIZERS:
        raise ConfigError("sweep", f"optimizer {opt!r} in {item!r} must be one of {', '.join(OPTIMIZERS)}")
    try:
        value = float(lr)
    except ValueError:
        raise ConfigError("sweep", f"{item!r}: expected optimizer:lr") from None
    if not value > 0:
        raise ConfigError("sweep", f"{item!r}: lr must be > 0")
    return opt, value


def run_name(unit: dict[str, Any]) -> str:
    """Tidy-table run name of a unit, e.g. ``main/relu`` or ``sweep/relu/adam:0.001``."""
    return DriftRun.of(unit).name


def runs_of(table: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The tidy table's rows per run name."""
    return {name: rows for name, rows in table.groupby("run")}


def build_summary(config: DriftConfig, table: pd.DataFrame, results: list[dict[str, Any]],
                  sweep_keys: list[DriftRun]) -> dict:
    """``summary.json`` of a drift run from its tidy table, results and sweep points."""
    runs = runs_of(table)
    last_hidden = config.depth + 1
    out: dict[str, Any] = {
        "scale": {"steps": config.steps,
                  "seeds": seeds_in(table),
                  "hidden": config.hidden, "depth": config.depth, "batch_size": config.batch_size,
                  "random_pairs": config.n_random,
                  "optimizer": f"{config.optimizer} lr={config.lr}",
                  "init": config.init, "compare_init": config.compare_init},
        "real_data": {},
        "failed_units": failed_units(results),
    }
    per_act: dict[str, Any] = {}
    for act in config.activations:
        main = runs.get(DriftRun("main", act).name)
        entry = {} if main is None else describe_drift(main, last_hidden)
        for cond in ("default-init", "skip", "digits", "digits-default-init", "digits-skip"):
            other = runs.get(DriftRun(cond, act).name)
            if other is not None:
                described = describe_drift(other, last_hidden)
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
    out["activations"] = per_act
    out["real_data"] = _real_data(config, per_act)
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
        z = later_drift_z(rows, last_hidden)
        early = z[z["step"] == min(config.record_every, config.steps)]
        d = describe_drift(rows, last_hidden)
        sweep.setdefault(key.activation, {})[key.setting] = {
            "drift_z_final": mean_value(at_step(z)) if len(z) else None,
            "drift_z_early": mean_value(early),
            "mean_shift_later_layers": d["mean_shift_later_layers"], "final_loss": d["final_loss"],
            "diverged_seeds": n_lost}
    out["sweep"] = sweep
    return out


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


# Headline numbers reported for the side conditions (default-init, skip, digits...).
CONDITION_KEYS = ("mean_shift_first_layer", "mean_shift_later_layers", "mean_shift_output_layer",
                  "mean_shift_per_layer", "final_sparsity", "final_neg_frac", "sparsity_start",
                  "sparsity_end", "test_accuracy", "drift_z_final", "grad_norm_peak_step",
                  "grad_norm_late_over_peak", "final_loss", "mean_shift_at_fit", "fit_step",
                  "fit_seeds")
# The real-data headline, shown first: the drift under each initialisation.
REAL_KEYS = ("mean_shift_later_layers", "mean_shift_per_layer", "sparsity_start",
             "sparsity_end", "test_accuracy", "final_loss", "mean_shift_at_fit", "fit_step")


def _real_data(config: DriftConfig, per_act: dict[str, Any]) -> dict[str, Any]:
    """The real-data setting and, per activation, its drift under He init and under PyTorch's
    default init ("Bug or Feature²" never states its initialisation)."""
    from actlab.experiments.drift.real_data import describe_setting

    out: dict[str, Any] = {"setting": describe_setting(config)}
    for act, entry in per_act.items():
        for cond, label in (("digits", f"{config.init}-init"),
                            ("digits-default-init", f"{config.compare_init}-init")):
            if cond in entry:
                out.setdefault(label, {})[act] = {k: entry[cond][k] for k in REAL_KEYS
                                                  if k in entry[cond]}
    return out


def _loss_curve(rows: pd.DataFrame | None) -> pd.Series | None:
    """Per (seed, step) loss of one run's rows; ``None`` without any."""
    loss = None if rows is None else rows[rows["metric"] == "loss"]
    return None if loss is None or loss.empty else loss.set_index(["seed", "step"])["value"]
