"""``ablations``: does the shifted student still win under other set-ups?

"Rethinking Activation Functions", App. C.3. Three variants of the ReLU teacher-student
pair, everything else unchanged (Fig. 14): ``post_norm`` (LayerNorm on the residual sum
instead of the block input), ``bias`` (trainable biases in every projection of teacher and
students) and ``soft_ce`` (soft-target cross-entropy against the teacher's softmax instead
of MSE). Under ``soft_ce`` the logged evaluation loss is the KL divergence to the teacher
(cross-entropy minus the teacher's entropy), so that it goes to zero like the MSE does.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from actlab.experiments.ablations.claims import claims as ablation_claims
from actlab.experiments.ablations.figures import ablations_figure
from actlab.experiments.ablations.summary import summarize
from actlab.experiments.teacher_student.paper import ABLATIONS, students
from actlab.recipes.teacher_student import ModelSettings, train_students
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

# variant -> the ModelSettings fields it changes
VARIANTS: dict[str, dict[str, Any]] = {
    "baseline": {},
    "post_norm": {"norm": "post"},
    "bias": {"bias": True},
    "soft_ce": {"loss": "soft_ce"},
}


@dataclass
class Config(ModelSettings):
    """Ablation settings: ``variants`` from ``baseline``, ``post_norm``, ``bias``, ``soft_ce``."""

    activation: str = checked("relu", spec="activation")
    variants: list[str] = checked(default_factory=lambda: ["post_norm", "bias", "soft_ce"],
                                  choices=tuple(VARIANTS))
    steps: int = checked(4000, ge=1)
    log_points: int = checked(40, ge=2)

    def check(self) -> None:
        """A plain activation name (the students add the shift)."""
        super().check()
        check_plain_activations("activation", [self.activation])


@register
class Ablations(Experiment):
    """Unshifted vs shifted students under post-norm, trainable biases and soft-target CE."""

    name: ClassVar[str] = "ablations"
    headline_figure: ClassVar[str | None] = "fig14_ablations"
    description: ClassVar[str] = "Shifted vs unshifted under post-norm, biases, soft-target CE"
    Config: ClassVar[type] = Config
    quick: ClassVar[dict[str, Any]] = {
        "d": 10, "m": 40, "L": 4, "steps": 1500, "batch_size": 128, "eval_size": 256,
        "log_points": 30,
    }
    full: ClassVar[dict[str, Any]] = {"d": 50, "m": 200, "L": 20, "steps": 8000}
    paper: ClassVar[Any] = ABLATIONS
    default_seeds: ClassVar[int] = 8
    seeds_per_unit: ClassVar[int | None] = None

    def units(self, config: Config) -> list[dict[str, Any]]:
        """One unit per variant."""
        return [{"variant": v} for v in config.variants]

    def workloads(self, config: Config, unit: dict[str, Any]) -> list[Any]:
        """The two students of a seed under the variant and their teacher (``actlab plan``)."""
        return students(dataclasses.replace(config, **VARIANTS[unit["variant"]]), 2)

    def run_unit(self, config: Config, unit: dict[str, Any], seeds: list[int],
                 ctx: UnitContext) -> UnitResult:
        """Train the pair under one variant."""
        variant = unit["variant"]
        settings = dataclasses.replace(config, **VARIANTS[variant])
        act = config.activation
        conditions = {"unshifted": f"{act}:shift=0", "shifted": f"{act}:shift=theory"}
        run = train_students(settings, act, conditions, seeds, progress=ctx.progress)
        result = UnitResult()
        run.add_rows(result, variant, blocks=False)
        if run.any_diverged:
            result.status = STATUS_DIVERGED
        return result

    def summarize(self, config: Config, table: Any, results: list[dict[str, Any]],
                  ctx: RunContext) -> dict:
        """Per variant: final losses, relative improvement, wins, crossover; Fig. 14."""
        variants = [r["unit"]["variant"] for r in results]
        if ctx.draw:  # the run's figures; not redrawn for each seed alone
            ablations_figure(config, table, variants, ctx)
        return summarize(config, table, results)

    def claims(self, summary: dict) -> list[Claim]:
        """The shifted student ends lower in every variant."""
        return ablation_claims(summary)
