"""The ``size-sweep`` summary: the improvement grid and the optimal shifts per size."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from actlab.analysis import finite_mean
from actlab.experiments.teacher_student.summary import (
    describe_scale,
    optimal_shifts,
    pair_summary,
    seeds_of,
)

if TYPE_CHECKING:
    from actlab.experiments.size_sweep import Config


@dataclass
class OptimalShifts:
    """One representative size: each seed's loss-minimising shift, the grid, the theory."""

    size: str
    best: np.ndarray
    shifts: list[float]
    theory_shift: float


def grid_cells(config: Config, table: Any) -> dict[str, dict[str, Any]]:
    """``{"DxMxL": {relative_improvement, shifted_wins}}`` of every finished grid cell."""
    early = max(1, round(0.05 * config.steps))
    cells: dict[str, dict[str, Any]] = {}
    for L in config.grid_L:
        for d in config.grid_d:
            for m in config.grid_m:
                pair = pair_summary(table, f"grid/{d}x{m}x{L}", early)
                if pair.get("relative_improvement") is not None:
                    cells[f"{d}x{m}x{L}"] = {
                        "relative_improvement": pair["relative_improvement"],
                        "shifted_wins": pair["shifted_wins"],
                    }
    return cells


def optimal_samples(table: Any, results: list[dict[str, Any]]) -> list[OptimalShifts]:
    """The :class:`OptimalShifts` of every finished representative size."""
    out = []
    for r in results:
        if r["unit"].get("part") == "optimal" and r["data"].get("shifts"):
            size = r["unit"]["size"]
            _, best = optimal_shifts(table, f"optimal/{size}", r["data"]["shifts"])
            out.append(OptimalShifts(size, best.dropna().to_numpy(dtype=float),
                                     sorted(r["data"]["shifts"].values()),
                                     r["data"]["theory_shift"]))
    return out


def summarize(config: Config, results: list[dict[str, Any]], cells: dict[str, dict[str, Any]],
              samples: list[OptimalShifts]) -> dict[str, Any]:
    """Scale, the grid cells with their mean improvement, the optimal-shift statistics."""
    size = f"grid d {config.grid_d} x m {config.grid_m} x L {config.grid_L}, sizes {config.sizes}"
    summary: dict[str, Any] = {"scale": describe_scale(config, seeds_of(results), size=size)}
    summary["grid"] = cells
    summary["mean_relative_improvement"] = finite_mean(
        [c["relative_improvement"] for c in cells.values()])
    optimal: dict[str, Any] = {}
    for sample in samples:
        best, theory = sample.best, sample.theory_shift
        if best.size:
            optimal[sample.size] = {
                "theory_shift": theory,
                "median_optimal_shift": float(np.median(best)),
                "mean_abs_distance_to_theory": float(np.mean(np.abs(best - theory))),
                "iqr": float(np.subtract(*np.percentile(best, [75, 25]))),
                "seeds": int(best.size),
                "optimal_shifts": best.tolist(),
            }
    summary["optimal_shift"] = optimal
    return summary
