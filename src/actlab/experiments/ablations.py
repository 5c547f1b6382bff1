"""``ablations``: does the shifted student still win under other set-ups? (seed 000, App. C.3).

Three variants of the ReLU teacher-student pair, everything else unchanged (Fig. 14):
``post_norm`` (LayerNorm on the residual sum instead of the block input), ``bias``
(trainable biases in every projection of teacher and students) and ``soft_ce``
(soft-target cross-entropy against the teacher's softmax instead of MSE). Under ``soft_ce``
the logged evaluation loss is the KL divergence to the teacher (cross-entropy minus the
teacher's entropy), so that it goes to zero like the MSE does.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

from actlab.errors import ConfigError, did_you_mean
from actlab.experiments import _ts_common as ts
from actlab.runner.claims import claim_id
from actlab.runner.experiment import (
    STATUS_DIVERGED,
    Claim,
    Experiment,
    RunContext,
    UnitContext,
    UnitResult,
    register,
)

# variant -> the ModelSettings fields it changes
VARIANTS: dict[str, dict[str, Any]] = {
    "baseline": {},
    "post_norm": {"norm": "post"},
    "bias": {"bias": True},
    "soft_ce": {"loss": "soft_ce"},
}


@dataclass
class Config(ts.ModelSettings):
    """Ablation settings: ``variants`` from ``baseline``, ``post_norm``, ``bias``, ``soft_ce``."""

    activation: str = "relu"
    variants: list[str] = field(default_factory=lambda: ["post_norm", "bias", "soft_ce"])
    steps: int = 4000
    log_points: int = 40

    def __post_init__(self) -> None:
        self.validate()
        ts.validate_activations("activation", [self.activation])

        for v in self.variants:
            if v not in VARIANTS:
                hint = did_you_mean(v, VARIANTS, n=3, cutoff=0.4, prefix="; ")
                raise ConfigError("variants", f"unknown variant {v!r}{hint} (valid: {', '.join(VARIANTS)})")


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
    default_seeds: ClassVar[int] = 8
    seeds_per_unit: ClassVar[int | None] = None

    def units(self, config: Config) -> list[dict[str, Any]]:
        """One unit per variant."""
        return [{"variant": v} for v in config.variants]

    def run_unit(self, config: Config, unit: dict[str, Any], seeds: list[int],
                 ctx: UnitContext) -> UnitResult:
        """Train the pair under one variant."""
        variant = unit["variant"]
        settings = dataclasses.replace(config, **VARIANTS[variant])
        act = config.activation
        conditions = {"unshifted": f"{act}:shift=0", "shifted": f"{act}:shift=theory"}
        run = ts.train_students(settings, act, conditions, seeds, progress=ctx.progress)
        result = UnitResult()
        run.add_rows(result, variant, blocks=False)
        if any(d.any() for d in run.diverged.values()):
            result.status = STATUS_DIVERGED
        return result

    def summarize(self, config: Config, table: Any, results: list[dict[str, Any]],
                  ctx: RunContext) -> dict:
        """Per variant: final losses, relative improvement, wins, crossover; Fig. 14."""
        summary: dict[str, Any] = {
            "scale": ts.describe_scale(config, len(results[0]["seeds"]) if results else 0),
            "activation": config.activation,
        }
        early = max(1, round(0.05 * config.steps))
        variants = [r["unit"]["variant"] for r in results]
        plt = ts._pyplot()
        fig, axes = plt.subplots(1, max(1, len(variants)), figsize=(4 * max(1, len(variants)), 3.6),
                                 squeeze=False)
        for ax, variant in zip(axes[0], variants):
            summary[variant] = ts.pair_summary(table, variant, early)
            ts.plot_pair_curves(ax, table, variant)
            ax.set_title(variant.replace("_", " "))
        axes[0, 0].set_ylabel("eval loss")
        axes[0, 0].legend()
        fig.suptitle(f"Fig. 14: {config.activation} students under ablations")
        ctx.save_figure(fig, "fig14_ablations")
        return summary

    def claims(self, summary: dict) -> list[Claim]:
        """The shifted student ends lower in every variant."""
        rows = []
        for variant, entry in summary.items():
            if not isinstance(entry, dict) or entry.get("final_loss_shifted") is None:
                continue
            fu, fs, wins = (entry["final_loss_unshifted"], entry["final_loss_shifted"],
                            entry["shifted_wins"])
            rows.append(Claim(
                f"shifted student ends lower under {variant.replace('_', ' ')}",
                f"final loss {fs:.4g} vs {fu:.4g} unshifted; shifted wins {100 * (wins or 0):.0f}% of seeds",
                bool(fs < fu and (wins or 0) > 0.5),
                "000 App. C.3, Fig. 14", id=claim_id(self.name, variant, "shifted-ends-lower"),
                value=fs, comparison="compound", threshold=fu,
            ))
        return rows
