"""The ``ablations`` summary: the unshifted-vs-shifted pair under each variant."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from actlab.experiments.teacher_student.summary import describe_scale, pair_summary, seeds_of

if TYPE_CHECKING:
    from actlab.experiments.ablations import Config


def summarize(config: Config, table: Any, results: list[dict[str, Any]]) -> dict[str, Any]:
    """Scale, activation and, per variant run, final losses, improvement, wins, crossover."""
    summary: dict[str, Any] = {
        "scale": describe_scale(config, seeds_of(results)),
        "activation": config.activation,
    }
    early = max(1, round(0.05 * config.steps))
    for r in results:
        variant = r["unit"]["variant"]
        summary[variant] = pair_summary(table, variant, early)
    return summary
