"""The ``shift-sweep`` summary: per activation, the mean final loss over the shift grid.

Per activation (the sweep trains all seeds of an activation as one ensemble, so each seed's
numbers are kept beside the means for the runner's per-seed statistics):

- ``theory_shift``, ``best_shift_median`` (median of each seed's loss-minimising shift),
  ``best_shift_of_mean_curve``, ``loss_ratio_theory_vs_best`` and ``final_loss_by_shift``
  (mean over seeds, keyed by ``f"{b:.4f}"``);
- ``final_loss_theory`` and ``final_loss_unshifted``: the mean final loss at the theory shift
  and at ``b = 0`` (the unshifted model; ``None`` when ``b = 0`` was not trained);
- ``seeds``: the seed ids, ascending, in the order of the per-seed lists;
- ``final_loss_theory_per_seed`` and ``final_loss_unshifted_per_seed``: each seed's final
  loss at the theory shift and at ``b = 0`` (NaN for a seed that diverged; ``None`` for the
  whole list when that shift was not trained). A seed's two entries share the initial
  parameters and batches (paired).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from actlab.analysis import finite_median
from actlab.experiments.teacher_student.summary import describe_scale, optimal_shifts, seeds_of

if TYPE_CHECKING:
    from actlab.experiments.shift_sweep import Config


@dataclass
class ShiftCurve:
    """One activation's sweep: final loss per seed (rows) and shift (columns), its mean over
    seeds, each seed's best shift and the theory shift."""

    frame: Any
    mean: Any
    best: Any
    theory_shift: float


def loss_by_shift(table: Any, results: list[dict[str, Any]]) -> dict[str, ShiftCurve]:
    """The :class:`ShiftCurve` of every activation whose unit finished."""
    out = {}
    for r in results:
        if r["data"].get("shifts"):
            activation, data = r["unit"]["activation"], r["data"]
            frame, best = optimal_shifts(table, activation, data["shifts"])
            out[activation] = ShiftCurve(frame, frame.mean(axis=0, skipna=True), best,
                                         data["theory_shift"])
    return out


def summarize(config: Config, results: list[dict[str, Any]],
              sweeps: dict[str, ShiftCurve]) -> dict[str, Any]:
    """Per activation: theory shift, median per-seed best shift, loss ratio theory/best."""
    summary: dict[str, Any] = {
        "scale": describe_scale(config, seeds_of(results)),
        "shift_offsets": list(config.shift_offsets),
    }
    for activation, sweep in sweeps.items():
        mean_curve, frame = sweep.mean, sweep.frame.sort_index()
        theory_column = round(sweep.theory_shift, 6)
        theory_loss = float(mean_curve.get(theory_column, np.nan))
        summary[activation] = {
            "theory_shift": sweep.theory_shift,
            "best_shift_median": finite_median(sweep.best.to_numpy(dtype=float)),
            "best_shift_of_mean_curve": float(mean_curve.idxmin()),
            "loss_ratio_theory_vs_best": theory_loss / float(mean_curve.min()),
            "final_loss_by_shift": {f"{b:.4f}": float(v) for b, v in mean_curve.items()},
            "final_loss_unshifted": float(mean_curve[0.0]) if 0.0 in mean_curve else None,
            "final_loss_theory": theory_loss,
            "seeds": [int(seed) for seed in frame.index],
            "final_loss_theory_per_seed": _per_seed(frame, theory_column),
            "final_loss_unshifted_per_seed": _per_seed(frame, 0.0),
        }
    return summary


def _per_seed(frame: Any, shift: float) -> list[float] | None:
    """Each seed's final loss at ``shift`` (rows in seed order); ``None`` if it was not trained."""
    if shift not in frame.columns:
        return None
    return [float(v) for v in frame[shift].to_numpy(dtype=float)]
