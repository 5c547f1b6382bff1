"""Per-seed steps shared by the GPT experiments (``lm-shift``, ``spikes``, ``gated-ffn``).

Each of them builds a seeded GPT of the experiment's scale, trains it with the scale's
schedule and batches, records the logged losses in the unit's table (marking the unit
diverged when a run stopped on a non-finite loss), and probes it on fixed validation windows.
Their summaries report means and sds over seeds, nan where there are too few values.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

from torch import Tensor

from actlab.data.text import TextCorpus
from actlab.nn.gpt import GPT, GPTConfig
from actlab.runner.experiment import STATUS_DIVERGED, UnitContext, UnitResult
from actlab.train.lm import LMScale, lm_batches, train_gpt
from actlab.train.loop import STATUS_OK, TrainResult
from actlab.train.placement import place, to_unit_device


def seeded_gpt(model_config: GPTConfig, seed: int, ctx: UnitContext) -> GPT:
    """A GPT initialised from ``seed`` on the unit's device."""
    return place(GPT(model_config, seed=seed), ctx.device)


def probe_windows(config: LMScale, corpus: TextCorpus, seed: int, n_batches: int,
                  ctx: UnitContext) -> list[Tensor]:
    """Inputs of ``n_batches`` fixed validation batches (the same for every seed), on device."""
    _, validation = lm_batches(corpus, config.batch_size, config.block_size, seed, n_batches)
    return [to_unit_device(x, device=ctx.device) for x, _ in validation()]


def train_and_record(config: LMScale, model: GPT, corpus: TextCorpus, seed: int,
                     ctx: UnitContext, result: UnitResult, run: str, *,
                     losses: Sequence[str] = ("val_loss",),
                     on_step: Callable[[int, float], None] | None = None) -> TrainResult:
    """Train ``model`` with the scale's settings and record its ``losses`` under ``run``.

    Rows ``(run, seed, step, "", key, value)`` follow the training history in order. A run
    that stopped on a non-finite loss sets the unit's status to diverged (never raised).
    """
    _, outcome = train_gpt(model.config, config.train_config(), corpus, seed=seed,
                           batch_size=config.batch_size, eval_batches=config.eval_batches,
                           model=model, on_step=on_step, progress=ctx.progress)
    for record in outcome.history:
        for key in losses:
            if key in record:
                result.add(run, seed, record["step"], "", key, record[key])
    # whether the model trained compiled, and the first update's time (holding the compile)
    result.add(run, seed, 0, "", "compiled", float(config.compiles()))
    result.add(run, seed, 0, "", "first_step_s", outcome.first_step_s)
    if outcome.status != STATUS_OK:
        result.status = STATUS_DIVERGED
    return outcome


def mean_or_nan(values: list[float]) -> float:
    """Mean of ``values``; nan when there are none."""
    return float(statistics.fmean(values)) if values else float("nan")


def sd_or_nan(values: list[float]) -> float:
    """Sample standard deviation of ``values``; nan with fewer than two."""
    return float(statistics.stdev(values)) if len(values) > 1 else float("nan")
