"""``size-sweep``: shifting's benefit across model sizes.

"Rethinking Activation Functions", App. C.1-C.2, Figs. 12-13. Two parts, both with ReLU by
default:

* a grid over residual width ``d``, MLP width ``m`` and depth ``L``: the relative
  improvement ``(L_unshifted - L_shifted) / L_unshifted`` of the final loss, averaged over
  paired seeds, as one heat map per depth (Fig. 12);
* for a few representative sizes, each seed's empirically optimal shift (the ``b`` with the
  lowest final loss on a grid around the theory shift), as distributions (Fig. 13).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from actlab.activations.registry import theory_shift
from actlab.errors import ConfigError
from actlab.experiments.size_sweep.claims import claims as size_sweep_claims
from actlab.experiments.size_sweep.figures import optimal_shift_figure, size_grid_figure
from actlab.experiments.size_sweep.summary import grid_cells, optimal_samples, summarize
from actlab.experiments.teacher_student.paper import SIZE_SWEEP, students
from actlab.recipes.teacher_student import (
    ModelSettings,
    check_shift_offsets,
    shift_conditions,
    train_students,
)
from actlab.runner.experiment import (
    STATUS_DIVERGED,
    Claim,
    Experiment,
    RunContext,
    UnitContext,
    UnitResult,
    register,
)
from actlab.runner.fields import check_plain_activations, checked


def parse_size(text: str) -> tuple[int, int, int]:
    """``"20x80x10"`` -> ``(20, 80, 10)``."""
    parts = text.lower().split("x")
    if len(parts) != 3 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise ConfigError("sizes", f"expected DxMxL with positive integers, got {text!r}")
    d, m, L = (int(p) for p in parts)
    return d, m, L


@dataclass
class Config(ModelSettings):
    """Size-sweep settings.

    ``grid_d``/``grid_m``/``grid_L``: the heat-map grid (Fig. 12). ``sizes``: ``DxMxL``
    models for the optimal-shift distributions (Fig. 13), each trained with the shifts
    ``theory + shift_offsets``. The paper's grid and its 100 seeds per size are far beyond
    a laptop; the defaults are a smaller grid (see docs/teacher_student.md).
    """

    activation: str = checked("relu", spec="activation")
    grid_d: list[int] = checked(default_factory=lambda: [10, 20, 40], ge=1)
    grid_m: list[int] = checked(default_factory=lambda: [20, 40, 80], ge=1)
    grid_L: list[int] = checked(default_factory=lambda: [5, 10], ge=1)
    sizes: list[str] = dataclasses.field(default_factory=lambda: ["5x20x2", "20x80x10"])
    shift_offsets: list[float] = dataclasses.field(
        default_factory=lambda: [-0.2, -0.15, -0.1, -0.05, 0.0, 0.05, 0.1, 0.15, 0.2]
    )
    steps: int = checked(2000, ge=1)
    log_points: int = checked(10, ge=2)

    def check(self) -> None:
        """A plain activation name, ``DxMxL`` sizes, offsets that include the theory shift."""
        super().check()
        check_plain_activations("activation", [self.activation])
        for size in self.sizes:
            parse_size(size)
        check_shift_offsets(self.shift_offsets)


@register
class SizeSweep(Experiment):
    """Relative improvement over a (d, m, L) grid and per-seed optimal shifts per size."""

    name: ClassVar[str] = "size-sweep"
    headline_figure: ClassVar[str | None] = "fig12_size_grid"
    description: ClassVar[str] = "Shifting's gain over (d, m, L) and optimal-shift distributions"
    Config: ClassVar[type] = Config
    quick: ClassVar[dict[str, Any]] = {
        "grid_d": [5, 10], "grid_m": [10, 40], "grid_L": [2, 4], "sizes": ["5x20x2", "10x40x4"],
        "steps": 600, "batch_size": 128, "eval_size": 256, "log_points": 4,
        "shift_offsets": [-0.15, -0.075, 0.0, 0.075, 0.15],
    }
    full: ClassVar[dict[str, Any]] = {
        "grid_d": [10, 20, 50], "grid_m": [20, 80, 200], "grid_L": [10, 20],
        "sizes": ["5x20x2", "20x80x10", "50x200x20"], "steps": 5000,
    }
    paper: ClassVar[Any] = SIZE_SWEEP
    default_seeds: ClassVar[int] = 8
    seeds_per_unit: ClassVar[int | None] = None

    def units(self, config: Config) -> list[dict[str, Any]]:
        """One unit per grid cell and one per representative size."""
        grid = [{"part": "grid", "d": d, "m": m, "L": L}
                for L in config.grid_L for d in config.grid_d for m in config.grid_m]
        return grid + [{"part": "optimal", "size": s} for s in config.sizes]

    def workloads(self, config: Config, unit: dict[str, Any]) -> list[Any]:
        """A grid cell's two students, or a size's students of every shift, and their
        teacher (``actlab plan``)."""
        if unit["part"] == "grid":
            return students(config, 2, d=unit["d"], m=unit["m"], L=unit["L"])
        d, m, L = parse_size(unit["size"])
        shifts = shift_conditions(config.activation, config.shift_offsets, include_zero=False)
        return students(config, len(shifts), d=d, m=m, L=L)

    def run_unit(self, config: Config, unit: dict[str, Any], seeds: list[int],
                 ctx: UnitContext) -> UnitResult:
        """A grid cell trains the pair; a size trains the whole shift grid."""
        act = config.activation
        if unit["part"] == "grid":
            d, m, L = unit["d"], unit["m"], unit["L"]
            prefix = f"grid/{d}x{m}x{L}"
            conditions = {"unshifted": f"{act}:shift=0", "shifted": f"{act}:shift=theory"}
            data: dict[str, Any] = {}
        else:
            d, m, L = parse_size(unit["size"])
            prefix = f"optimal/{unit['size']}"
            shifts = shift_conditions(act, config.shift_offsets, include_zero=False)
            conditions = {name: f"{act}:shift={b!r}" for name, b in shifts.items()}
            data = {"shifts": shifts, "theory_shift": theory_shift(act)}
        settings = dataclasses.replace(config, d=d, m=m, L=L)
        run = train_students(settings, act, conditions, seeds, progress=ctx.progress)
        result = UnitResult(data=data)
        run.add_rows(result, prefix, blocks=False)
        if run.any_diverged:
            result.status = STATUS_DIVERGED
        return result

    def summarize(self, config: Config, table: Any, results: list[dict[str, Any]],
                  ctx: RunContext) -> dict:
        """Heat maps of relative improvement and optimal-shift distributions."""
        cells, samples = grid_cells(config, table), optimal_samples(table, results)
        if ctx.draw:  # the run's figures; not redrawn for each seed alone
            if all((config.grid_d, config.grid_m, config.grid_L)):  # a run of sizes only has none
                size_grid_figure(config, cells, ctx)
            if samples:
                optimal_shift_figure(samples, ctx)
        return summarize(config, results, cells, samples)

    def claims(self, summary: dict) -> list[Claim]:
        """Shifting helps on average across sizes; optimal shifts concentrate near theory."""
        return size_sweep_claims(summary)
