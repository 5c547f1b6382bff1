"""The ``lm-shift`` summary: loss residuals, final losses and overshoot per activation."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from actlab.analysis import mean_or_nan, overshoot, overshoot_peak_step, sd_or_nan

if TYPE_CHECKING:
    from actlab.experiments.lm_shift import LMShiftConfig

CONDITIONS = ("unshifted", "shifted")


def build_summary(config: LMShiftConfig, table: Any, results: list[dict]) -> dict:
    """``summary.json``: the first activation's headline numbers, then every activation's."""
    per_activation = {a: activation_summary(table, a, config) for a in config.activations}
    first = per_activation[config.activations[0]]
    summary = {key: first[key] for key in ("val_loss_unshifted", "val_loss_shifted",
                                           "residual_final", "residual_early")}
    summary.update(activation=config.activations[0], per_activation=per_activation,
                   init_std=config.init_std,
                   scale=f"{config.n_layer} layers, d={config.n_embd}, context {config.block_size}, "
                   f"batch {config.batch_size}, {config.steps} steps on {config.data}",
                   failed_runs=sum(r["status"] != "ok" for r in results))
    return summary


def activation_summary(table: Any, act: str, config: LMShiftConfig) -> dict:
    """Residuals (final, late, early; paired by seed), final losses, overshoot and its step of ``act``."""
    finals: dict[str, dict[int, float]] = {c: {} for c in CONDITIONS}
    curves: dict[str, dict[int, dict[int, float]]] = {c: {} for c in CONDITIONS}
    for condition in CONDITIONS:
        val = table[(table.metric == "val_loss") & (table.run == f"{act}/{condition}")]
        for seed, group in val.groupby("seed"):
            group = group.sort_values("step")
            finals[condition][int(seed)] = float(group.value.iloc[-1])
            curves[condition][int(seed)] = dict(zip(group.step.astype(int), group.value))
    seeds = sorted(set(finals["unshifted"]) & set(finals["shifted"]))
    residuals = [finals["shifted"][s] - finals["unshifted"][s] for s in seeds]
    steps = sorted(set.intersection(*[set(curves[c][s]) for c in CONDITIONS for s in seeds])) \
        if seeds else []
    early_step = next((t for t in steps if t >= config.early_fraction * config.steps and t > 0),
                      steps[-1] if steps else -1)
    early = [curves["shifted"][s][early_step] - curves["unshifted"][s][early_step] for s in seeds]
    # §4.3's "stably": every evaluation in the last half of training (the final one included)
    late_steps = [t for t in steps if t >= config.steps / 2]
    late = [mean_or_nan([curves["shifted"][s][t] - curves["unshifted"][s][t] for s in seeds])
            for t in late_steps]
    over = {c: overshoot_of(table, f"{act}/{c}") for c in CONDITIONS}
    return {
        "val_loss_unshifted": mean_or_nan([finals["unshifted"][s] for s in seeds]),
        "val_loss_shifted": mean_or_nan([finals["shifted"][s] for s in seeds]),
        "residual_final": mean_or_nan(residuals),
        "residual_final_sd": sd_or_nan(residuals),
        "residual_early": mean_or_nan(early),
        "early_step": int(early_step),
        "residual_late": late,
        "late_steps": [int(t) for t in late_steps],
        "residual_per_seed": dict(zip(map(str, seeds), residuals)),
        "seeds_shift_better": int(sum(r < 0 for r in residuals)),
        "n_seeds": len(seeds),
        "overshoot_unshifted": over["unshifted"][0],
        "overshoot_shifted": over["shifted"][0],
        "overshoot_step_unshifted": over["unshifted"][1],
        "overshoot_step_shifted": over["shifted"][1],
    }


def overshoot_of(table: Any, run: str) -> tuple[float, float]:
    """Mean over seeds and blocks of the hidden-state overshoot of ``run`` (how far each
    block's hidden-state mean goes past its final value, :func:`actlab.analysis.overshoot`),
    and the mean step of its peak (over the seed-blocks that overshoot); nan where none."""
    rows = table[(table.run == run) & (table.metric == "hidden_mean")]
    sizes: list[float] = []
    steps: list[float] = []
    for _, group in rows.groupby("layer"):
        hidden = group.pivot_table(index="step", columns="seed", values="value",
                                   aggfunc="first").sort_index()
        sizes += [float(v) for v in overshoot(hidden) if np.isfinite(v)]
        steps += [float(v) for v in overshoot_peak_step(hidden) if np.isfinite(v)]
    return mean_or_nan(sizes), mean_or_nan(steps)
