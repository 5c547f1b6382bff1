"""``shift-sweep``: final loss against the activation shift b.

"Rethinking Activation Functions", App. A.2, Fig. 9. For each activation, students with
shifts ``b = b_theory + offset`` (and ``b = 0``) learn the same unshifted teacher; within a
seed every shift starts from the same parameters and sees the same batches. We report where
each seed's final loss is lowest and how close the theory shift comes to the best one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from actlab.activations.registry import theory_shift
from actlab.experiments.shift_sweep.claims import claims as shift_sweep_claims
from actlab.experiments.shift_sweep.figures import shift_sweep_figure
from actlab.experiments.shift_sweep.summary import loss_by_shift, summarize
from actlab.experiments.teacher_student.paper import SHIFT_SWEEP, students
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


@dataclass
class Config(ModelSettings):
    """Shift-sweep settings: ``shift_offsets`` are added to each activation's theory shift."""

    activations: list[str] = checked(
        default_factory=lambda: ["relu", "gelu", "silu", "tanh", "sigmoid"],
        spec="activation", nonempty=True,
    )
    shift_offsets: list[float] = checked(
        default_factory=lambda: [-0.2, -0.15, -0.1, -0.05, 0.0, 0.05, 0.1, 0.15, 0.2]
    )
    include_unshifted: bool = True
    # Past sigmoid's crossover (~3600 steps in teacher-student), like teacher-student's default.
    steps: int = checked(6000, ge=1)
    log_points: int = checked(20, ge=2)

    def check(self) -> None:
        """Plain activation names; the offsets include the theory shift itself."""
        super().check()
        check_plain_activations("activations", self.activations)
        check_shift_offsets(self.shift_offsets)


@register
class ShiftSweep(Experiment):
    """Final loss as a function of the shift, per activation, over paired seeds."""

    name: ClassVar[str] = "shift-sweep"
    headline_figure: ClassVar[str | None] = "fig9_shift_sweep"
    description: ClassVar[str] = "Final loss vs activation shift b; is the theory shift near-optimal?"
    Config: ClassVar[type] = Config
    quick: ClassVar[dict[str, Any]] = {
        "d": 10, "m": 40, "L": 4, "steps": 1000, "batch_size": 128, "eval_size": 256,
        "shift_offsets": [-0.15, -0.075, 0.0, 0.075, 0.15], "log_points": 8,
    }
    full: ClassVar[dict[str, Any]] = {"steps": 10000}
    paper: ClassVar[Any] = SHIFT_SWEEP
    default_seeds: ClassVar[int] = 6
    seeds_per_unit: ClassVar[int | None] = None

    def units(self, config: Config) -> list[dict[str, Any]]:
        """One unit per activation."""
        return [{"activation": a} for a in config.activations]

    def workloads(self, config: Config, unit: dict[str, Any]) -> list[Any]:
        """One student per shift of a seed and their teacher (``actlab plan``)."""
        shifts = shift_conditions(unit["activation"], config.shift_offsets,
                                  config.include_unshifted)
        return students(config, len(shifts))

    def run_unit(self, config: Config, unit: dict[str, Any], seeds: list[int],
                 ctx: UnitContext) -> UnitResult:
        """Train one student per shift for every seed (one ensemble)."""
        activation = unit["activation"]
        shifts = shift_conditions(activation, config.shift_offsets, config.include_unshifted)
        conditions = {name: f"{activation}:shift={b!r}" for name, b in shifts.items()}
        run = train_students(config, activation, conditions, seeds, progress=ctx.progress)
        result = UnitResult()
        run.add_rows(result, activation, blocks=False)
        result.data = {"shifts": shifts, "theory_shift": theory_shift(activation)}
        if run.any_diverged:
            result.status = STATUS_DIVERGED
        return result

    def summarize(self, config: Config, table: Any, results: list[dict[str, Any]],
                  ctx: RunContext) -> dict:
        """Per activation: theory shift, median per-seed best shift, loss ratio theory/best."""
        sweeps = loss_by_shift(table, results)
        if ctx.draw:  # the run's figures; not redrawn for each seed alone
            shift_sweep_figure(sweeps, ctx)
        return summarize(config, results, sweeps)

    def claims(self, summary: dict) -> list[Claim]:
        """Theory shift near-optimal per activation (mean final loss within 10% of the best)."""
        return shift_sweep_claims(summary)
