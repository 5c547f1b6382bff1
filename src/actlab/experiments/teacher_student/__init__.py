"""``teacher-student``: unshifted vs shifted students of a fixed teacher.

"Rethinking Activation Functions", §2 and Apps. A-C. Per activation, each seed has a teacher
with the unshifted activation and two students with identical initial parameters and
batches, one with ``shift=theory`` (Table 1). We log loss curves (Fig. 2 top), the
hidden-state mean of every block (Figs. 2 bottom, 15), the post-activation means (Fig. 8),
the top Gauss-Newton and Hessian eigenvalues over training (Fig. 4), the
initial-gradient-plane landscapes with both trajectories and the shifted student's off-plane
plane (Fig. 3), and the gradient angle between the students at k = 1, 5, 20, 100 against the
one-layer theory (Table 2; the theory in the summary, from the config alone).

The training is :func:`actlab.recipes.teacher_student.train_students`; the summary helpers
of this package's :mod:`.summary` (:func:`~.summary.pair_summary`, ...) serve the other
experiments of the family too (``shift-sweep``, ``size-sweep``, ``ablations``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from actlab.activations.spec import theory_shift
from actlab.errors import ConfigError
from actlab.experiments.teacher_student.claims import claims as teacher_student_claims
from actlab.experiments.teacher_student.figures import teacher_student_figures
from actlab.experiments.teacher_student.paper import TEACHER_STUDENT, students
from actlab.experiments.teacher_student.summary import TABLE2_ETA, summarize
from actlab.recipes.teacher_student import (
    ModelSettings,
    curvature_top,
    landscape,
    start_point,
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

PAPER_ACTIVATIONS = ("relu", "gelu", "silu", "sigmoid")


@dataclass
class Config(ModelSettings):
    """Teacher-student settings (model/training fields from :class:`ModelSettings`).

    ``angle_steps``: updates at which the students' gradient angle is measured (Table 2).
    ``curvature_seeds``/``curvature_points``: seeds and logged steps with top eigenvalues.
    ``landscape_points``: grid size per axis of the Fig. 3 planes (0 disables them).
    ``curvature_k``: Hessian eigenvalues measured at each curvature point (the leading ones
    of Fig. 4; 5 is ours), by Lanczos warm-started from the previous point's vectors unless
    ``curvature_warm_start`` is false.
    ``angle_theory_eta``: the gradient-descent learning rate of the one-layer angle theory
    (eqs. 58-61). The paper does not state it; the default 2.5e-5 was found by inverting
    eq. 61 against Table 2's theory column (ReLU, m = 200): only eta in about
    [2.47e-5, 2.58e-5] rounds to its k = 5, 20, 100 entries (ours; see
    :data:`~.summary.TABLE2_ETA`). It is not the Adam learning rate ``lr`` of the students.
    """

    activations: list[str] = checked(default_factory=lambda: list(PAPER_ACTIVATIONS),
                                     spec="activation", nonempty=True)
    angle_steps: list[int] = checked(default_factory=lambda: [1, 5, 20, 100], ge=1)
    curvature_seeds: int = checked(2, ge=0)
    curvature_points: int = checked(8, ge=0)
    curvature_k: int = checked(5, ge=1)
    curvature_warm_start: bool = True
    landscape_points: int = 21
    angle_theory_eta: float = checked(TABLE2_ETA, ge=0)

    def check(self) -> None:
        """Plain activation names; a landscape grid of at least 3 points (or none)."""
        super().check()
        check_plain_activations("activations", self.activations)
        if self.landscape_points not in (0,) and self.landscape_points < 3:
            raise ConfigError("landscape_points", f"must be 0 or >= 3, got {self.landscape_points}")


@register
class TeacherStudent(Experiment):
    """Unshifted vs ``shift=theory`` students of an unshifted teacher, per activation."""

    name: ClassVar[str] = "teacher-student"
    headline_figure: ClassVar[str | None] = "fig2_loss_and_hidden_mean"
    description: ClassVar[str] = (
        "Shifted vs unshifted students: loss reversal, overshoot, sharpness, landscapes, angles"
    )
    Config: ClassVar[type] = Config
    quick: ClassVar[dict[str, Any]] = {
        "d": 10, "m": 40, "L": 4, "steps": 1500, "batch_size": 128, "eval_size": 256,
        "log_points": 40, "curvature_seeds": 1, "curvature_points": 4, "landscape_points": 11,
    }
    full: ClassVar[dict[str, Any]] = {"d": 50, "m": 200, "L": 20, "steps": 8000}
    paper: ClassVar[Any] = TEACHER_STUDENT
    default_seeds: ClassVar[int] = 8
    seeds_per_unit: ClassVar[int | None] = None

    def units(self, config: Config) -> list[dict[str, Any]]:
        """One unit per activation (all seeds and both students in one ensemble)."""
        return [{"activation": a} for a in config.activations]

    def workloads(self, config: Config, unit: dict[str, Any]) -> list[Any]:
        """The two students of a seed and their teacher (``actlab plan``)."""
        return students(config, 2)

    def run_unit(
        self, config: Config, unit: dict[str, Any], seeds: list[int], ctx: UnitContext
    ) -> UnitResult:
        """Train the pair for every seed; record curves, angles, curvature and landscapes."""
        activation = unit["activation"]
        conditions = {"unshifted": f"{activation}:shift=0", "shifted": f"{activation}:shift=theory"}
        start: dict[str, Any] = {}

        def on_start(_teacher: Any, members: Any, x_eval: Any, y_eval: Any) -> None:
            start["point"] = start_point(members, x_eval, y_eval, config.loss)

        run = train_students(
            config, activation, conditions, seeds,
            progress=ctx.progress,
            angle_steps=config.angle_steps,
            checkpoint_seed_index=0 if config.landscape_points else None,
            curvature_seeds=config.curvature_seeds,
            curvature_points=config.curvature_points,
            curvature_fn=curvature_top(config.loss, k=config.curvature_k,
                                       warm_start=config.curvature_warm_start)
            if config.curvature_seeds else None,
            on_start=on_start if config.landscape_points else None,
            track_plane=True,
        )
        result = UnitResult()
        run.add_rows(result, activation)
        result.data["theory_shift"] = theory_shift(activation)
        if config.landscape_points:
            try:
                result.data["landscape"] = landscape(run, start["point"], config.loss,
                                                     config.landscape_points)
            except ValueError as exc:  # degenerate plane: record, don't fail the unit
                result.data["landscape_error"] = str(exc)
        if run.any_diverged:
            result.status = STATUS_DIVERGED
        return result

    def summarize(self, config: Config, table: Any, results: list[dict[str, Any]],
                  ctx: RunContext) -> dict:
        """Per activation: final/early losses, wins, crossover, overshoot, sharpness, angles."""
        summary = summarize(config, table, results)
        data = {r["unit"]["activation"]: r["data"] for r in results}
        if activation_present := [a for a in config.activations if a in data]:
            if ctx.draw:  # the run's figures; not redrawn for each seed alone
                teacher_student_figures(config, table, data, activation_present, ctx)
        return summary

    def claims(self, summary: dict) -> list[Claim]:
        """The paper's claims per activation, with what we measured."""
        return teacher_student_claims(summary)
