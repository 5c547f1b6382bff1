"""The ``vit-shift`` summary: final accuracies, paired residuals, overshoot, and a note of
which of the effects of "Rethinking Activation Functions" §4.1 this run reproduced."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import pandas as pd

from actlab import analysis
from actlab.experiments.vit_shift.claims import claims

if TYPE_CHECKING:
    from actlab.experiments.vit_shift import ViTShiftConfig

PREFIX = "vit"  # runs are vit/<condition>
CONDITIONS = ("unshifted", "shifted")
EARLY_FRACTION = 0.05  # "early" comparison point: the checkpoint nearest 5% of training


def condition_entry(table: pd.DataFrame, run: str, depth: int) -> dict[str, Any]:
    """Final and best of each loss and accuracy curve, and the overshoot of every block with the
    mean step of its peak (:func:`actlab.analysis.overshoot`)."""
    entry: dict[str, Any] = {}
    for metric in ("test_accuracy", "test_loss", "train_loss", "train_accuracy"):
        curve = analysis.curves(table, run, metric)
        if not curve.empty:
            entry[f"final_{metric}"] = analysis.finite_mean(curve.iloc[-1])
            entry[f"best_{metric}"] = analysis.finite_mean(
                curve.max() if "accuracy" in metric else curve.min())
    per_block, step_per_block = {}, {}
    for block in range(depth):
        hidden = analysis.curves(table, run, "hidden_mean", f"block{block}")
        if not hidden.empty:
            per_block[f"block{block}"] = analysis.finite_mean(analysis.overshoot(hidden))
            step_per_block[f"block{block}"] = analysis.finite_mean(
                analysis.overshoot_peak_step(hidden))
    entry["overshoot_per_block"] = per_block
    entry["overshoot_step_per_block"] = step_per_block
    entry["overshoot"] = per_block.get(f"block{depth - 1}")
    entry["overshoot_step"] = step_per_block.get(f"block{depth - 1}")
    return entry


def build_summary(config: ViTShiftConfig, table: pd.DataFrame,
                  results: list[dict[str, Any]]) -> dict[str, Any]:
    """``summary.json`` (see the package docstring)."""
    summary: dict[str, Any] = {
        "scale": {"steps": config.steps, "batch_size": config.batch_size, "dim": config.dim,
                  "depth": config.depth, "heads": config.heads,
                  "optimizer": f"{config.optimizer} lr={config.lr:g} "
                               f"wd={config.weight_decay:g}",
                  "seeds": analysis.seeds_in(table) if len(table) else []},
        "failed_units": analysis.failed_units(results),
    }
    for cond in CONDITIONS:
        entry = condition_entry(table, f"{PREFIX}/{cond}", config.depth)
        summary[cond] = entry
        summary[f"test_acc_{cond}"] = entry.get("final_test_accuracy")
        summary[f"overshoot_{cond}"] = entry.get("overshoot")
        summary[f"overshoot_step_{cond}"] = entry.get("overshoot_step")
    for metric, key in (("test_loss", "test_loss"), ("train_loss", "train_loss"),
                        ("test_accuracy", "acc")):
        summary[f"{key}_residual_final"] = summary[f"{key}_residual_early"] = None
        residual = analysis.paired_residual(table, metric, PREFIX)
        if residual.empty:
            continue
        # with epochs the run's length comes from its data: the last checkpoint
        total = int(max(residual.index)) if config.epochs else config.steps
        step = analysis.early_step(list(residual.index), total, EARLY_FRACTION)
        summary["early_step"] = step
        summary[f"{key}_residual_final"] = analysis.finite_mean(residual.iloc[-1])
        summary[f"{key}_residual_early"] = analysis.finite_mean(residual.loc[step])
        mean = residual.mean(axis=1)
        summary[f"{key}_residual_min"] = float(mean.min())
        summary[f"{key}_residual_max"] = float(mean.max())
    u = analysis.curves(table, f"{PREFIX}/unshifted", "test_loss")
    s = analysis.curves(table, f"{PREFIX}/shifted", "test_loss")
    if not u.empty and not s.empty:
        summary["test_loss_crossover_steps"] = [
            None if math.isnan(v) else v for v in analysis.crossover_steps(u, s)]
    # Which of the paper's effects this run reproduced, in words (from the claims).
    summary["note"] = [f"{'reproduced' if c.held else 'NOT reproduced'}: {c.claim} "
                       f"({c.measured})" for c in claims(summary)]
    return summary
