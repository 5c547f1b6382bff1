"""The DiT protocol shared by ``dit-shift`` and ``dit-percentile``: train a class-conditional
DiT per condition and seed, and measure it along the way.

One run (:func:`train_condition`) trains :class:`~actlab.nn.dit.DiT` with the ε-loss of
:mod:`actlab.diffusion` (AdamW, DiT's linear β schedule, T = 1000) and an
:class:`~actlab.train.ema.EMA` of the weights, and records, under ``run``:

* ``batch_loss``: the batch loss averaged over each window of ``loss_every`` updates;
* at ``log_points`` log-spaced checkpoints (0 included), in eval mode:
  ``train_loss`` (the ε-loss of the first ``loss_samples`` training examples at fixed
  steps t and noise ε, the same draws for every condition and seed, so residuals are
  paired), ``hidden_mean`` of the residual stream after every block (layer ``blockN``, the
  statistic of "Rethinking Activation Functions" §2.2) and ``act_mean`` of every MLP
  activation (``actN``), both on a fixed probe batch of noised training images;
* at ``eval_points`` evenly spaced checkpoints (the last is the end of training): DDIM (or
  DDPM) samples of the EMA model with classifier-free guidance, ``fid_samples`` of them
  with fixed noise and fixed class labels (so every checkpoint and condition is scored on
  the same number of samples from the same noise), their FID and IS on a named feature
  network (:mod:`actlab.recipes.dit_quality`: the offline digits classifier, or for
  latents the FID Inception-v3 on the VAE-decoded images; metric names carry the network's
  name) and, on pixels, ``detail_ratio`` (our sharpness proxy, :func:`detail_ratio`); the
  first ``grid_per_class`` samples of each class go to the unit's data as a sample grid;
* with ``timed=True``: training steps per second by :class:`~actlab.train.timing.StepClock`
  (thread CPU time on the CPU, CUDA events on a GPU) during warm-up and after it, steps
  with an evaluation left out.

The condition's config, data and model are :mod:`actlab.recipes.dit_setup` (the papers'
scaling of the EMA decay and the warm-up is explained there); their names are importable from
here too. The summaries and figures the two experiments share live with them
(:mod:`actlab.experiments.dit_common`).

Data-parallel (``dist``, ``actlab run --nproc N``): the DiT trains under DDP; every rank draws
the same global batch with its per-sample draws (t, ε, label dropout: ``DiffusionLoss.draws``,
made for the whole batch in the batch function) and keeps its rows, so each sample sees what
it would in one process. The hidden-state probe measures this rank's part of the probe batch
and :class:`~actlab.probe.Probe` merges the ranks' statistics; the samples are shared out by
chunk and their scores' statistics summed (:mod:`actlab.recipes.dit_quality`). One process
on the global batch and N ranks record the same rows (to rounding; batch-statistics norms,
as Percentile Centering's running statistics, see only their rank's rows).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from actlab.device import to_model_device, unit_device
from actlab.recipes.dit_quality import (  # noqa: F401  (detail_ratio importable from here)
    SAMPLE_SEED,
    QualitySetup,
    detail_ratio,
    quality_setup,
    sample_quality,
)
from actlab.recipes.dit_setup import (  # noqa: F401  (importable from here, as before the split)
    CUSTOM,
    DIT_S2_STEPS,
    PAPER_EMA,
    PAPER_STEPS,
    PAPER_WARMUP,
    DiTData,
    DiTProtocolConfig,
    build_model,
    load_data,
    scaled_decay,
    scaled_warmup,
)
from actlab.train.callbacks import Callback, LossHistory
from actlab.train.distributed import DistInfo, rank_slice, unwrap_model, wrap_model

LOSS_SEED = 1_000_003  # fixed draws of the training-loss probe (ours)
PROBE_SEED = 1_000_033  # fixed probe batch of the hidden-state means (ours)
PROBE_IMAGES = 64
PROBE_STEPS = (50, 250, 500, 750)  # diffusion steps t of the probe batch, cycled (ours)


def short_layer(layer: str) -> str:
    """``blocks.3`` -> ``block3``, ``blocks.3.mlp.act`` -> ``act3``."""
    parts = layer.split(".")
    if len(parts) >= 2 and parts[0] == "blocks" and parts[1].isdigit():
        return f"block{parts[1]}" if len(parts) == 2 else f"act{parts[1]}"
    return layer


class _Evaluator(Callback):
    """Checkpoint measurements (see the module docstring), in eval mode, then back."""

    def __init__(
        self,
        config: DiTProtocolConfig,
        data: DiTData,
        ema: Any,
        result: Any,
        run: str,
        seed: int,
        quality: QualitySetup | None,
        dist: DistInfo | None = None,
    ) -> None:
        from actlab.diffusion import GaussianDiffusion

        self.log_at, self.eval_at = set(config.log_steps()), set(config.eval_steps())
        super().__init__(at=self.log_at | self.eval_at)
        self.config, self.data, self.ema, self.result = config, data, ema, result
        self.run, self.seed, self.quality = run, seed, quality
        self.dist = dist or DistInfo()
        self.diffusion = GaussianDiffusion.linear()
        g = torch.Generator().manual_seed(LOSS_SEED)
        n = len(data.probe_x)
        self.loss_t = torch.randint(0, self.diffusion.num_timesteps, (n,), generator=g)
        self.loss_noise = torch.randn(data.probe_x.shape, generator=g)
        g = torch.Generator().manual_seed(PROBE_SEED)
        k = min(PROBE_IMAGES, n)
        self.probe_t = torch.tensor([PROBE_STEPS[i % len(PROBE_STEPS)] for i in range(k)])
        self.probe_xt = self.diffusion.q_sample(
            data.probe_x[:k].double(),
            self.probe_t,
            torch.randn(data.probe_x[:k].shape, generator=g, dtype=torch.float64),
        ).float()
        self.grids: dict[str, list] = {}

    def on_step(self, trainer: Any, step: int, loss: Tensor | None) -> None:
        model = unwrap_model(trainer.model)
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                if step in self.log_at:
                    self._log(model, step)
                if step in self.eval_at and self.quality is not None:
                    self._quality(step)
        finally:
            model.train(was_training)

    def _log(self, model: nn.Module, step: int) -> None:
        from actlab.diffusion import loss_terms
        from actlab.probe.probe import Probe

        x0, y, noise = _on_model(model, self.data.probe_x, self.data.probe_y, self.loss_noise)
        terms = loss_terms(self.diffusion, model, x0, y, self.loss_t, noise)
        self.result.add(self.run, self.seed, step, "", "train_loss", float(terms["loss"].mean()))
        # Under DDP (a process group) the probe merges the ranks' statistics: each measures
        # its own part of the probe batch.
        probe = Probe(
            model,
            every=[0],
            blocks=list(model.blocks),
            weights=False,
            metrics=["hidden_mean", "act_mean"],
        )
        part = rank_slice(len(self.probe_t), self.dist)
        try:
            xt, t, y = _on_model(
                model, self.probe_xt[part], self.probe_t[part],
                self.data.probe_y[: len(self.probe_t)][part]
            )
            model(xt, t, y)
            probe.step()
            table = probe.table()
        finally:
            probe.close()
        for row in table.itertuples():
            self.result.add(
                self.run, self.seed, step, short_layer(row.layer), row.metric, float(row.value)
            )

    def _quality(self, step: int) -> None:
        config, data = self.config, self.data
        scores, first = sample_quality(self.ema.module, self.diffusion, config, data,
                                       self.quality, self.dist)
        for key, value in scores.items():
            if not key.startswith("is_std"):
                self.result.add(self.run, self.seed, step, "", key, value)
        if first is None:
            return
        # labels cycle through the classes: sample i*classes + c is the i-th of class c
        classes = data.num_classes
        per = min(config.grid_per_class, len(first) // classes)
        if per < 1:  # the first chunk holds less than one sample of every class
            return
        grid = first[: per * classes].reshape(per, classes, *data.shape[1:]).transpose(0, 1)
        self.grids[str(step)] = grid.float().cpu().numpy().round(3).tolist()


def _on_model(model: nn.Module, *tensors: Tensor) -> tuple[Tensor, ...]:
    """The tensors on ``model``'s device, floating ones in its dtype (float64 runs)."""
    dtype = next(model.parameters()).dtype
    moved = to_model_device(model, *tensors)
    moved = moved if isinstance(moved, tuple) else (moved,)
    return tuple(t.to(dtype) if t.is_floating_point() else t for t in moved)


class _Stamp(Callback):
    """Stamps the step clock after every update count, 0 included (after the evaluator)."""

    def __init__(self, clock: Any) -> None:
        super().__init__(every=1)
        self.clock = clock

    def fires(self, step: int) -> bool:
        """Every update count."""
        return True

    def on_step(self, trainer: Any, step: int, loss: Tensor | None) -> None:
        """One stamp."""
        self.clock.stamp()


def step_rates(intervals: np.ndarray, skip: set[int], warmup: int) -> dict[str, float]:
    """Steps/s during warm-up and after it (``throughput``'s block median) from per-step
    intervals (interval i is update i + 1 plus the callbacks after it), leaving out the
    updates in ``skip`` (those followed by an evaluation)."""
    from actlab.train.timing import throughput

    keep = np.array([i + 1 not in skip for i in range(len(intervals))], dtype=bool)
    index = np.arange(len(intervals))
    warm = intervals[keep & (index < warmup)]
    after = intervals[keep & (index >= warmup)]
    out = dict.fromkeys(
        ("steps_per_s_warmup", "steps_per_s_warmup_noise", "steps_per_s", "steps_per_s_noise"),
        math.nan,
    )
    if len(warm):
        out["steps_per_s_warmup"], out["steps_per_s_warmup_noise"] = throughput(warm)
    if len(after):
        out["steps_per_s"], out["steps_per_s_noise"] = throughput(after)
    return out


def train_condition(
    config: DiTProtocolConfig,
    result: Any,
    run: str,
    seed: int,
    *,
    activation: str,
    norm: str = "layernorm",
    bias: bool = True,
    timed: bool = False,
    progress: Callable[..., Any] | None = None,
    dist: DistInfo | None = None,
) -> str:
    """Train one condition for one seed, adding its rows to ``result`` (and its sample grids
    to ``result.data[f"{run}/seed{seed}"]``); returns the trainer's status. ``dist``: this
    process's place in a data-parallel unit (module docstring); one process by default."""
    from actlab.diffusion import GaussianDiffusion
    from actlab.recipes.diffusion import DiffusionLoss
    from actlab.train.ema import EMA
    from actlab.train.loop import Trainer
    from actlab.train.settings import TrainSettings
    from actlab.train.timing import StepClock

    data = load_data(config, seed)
    model = build_model(config, data, activation=activation, norm=norm, seed=seed, bias=bias)
    dtype = torch.float64 if config.dtype == "float64" else torch.float32
    model = model.to(dtype)  # before DDP builds its buckets and the EMA its copy
    quality = quality_setup(config, data)
    generator = torch.Generator().manual_seed(seed)  # batch order, t, ε and label dropout
    ema = EMA(model, decay=config.ema_decay)
    history = LossHistory()
    evaluator = _Evaluator(config, data, ema, result, run, seed, quality, dist)
    clock = StepClock(unit_device())
    settings = TrainSettings(
        optimizer="adamw",
        lr=config.lr,
        weight_decay=config.weight_decay,
        steps=config.steps,
        batch_size=config.batch_size,
        log_every=config.steps,
        eval_every=0,
        checkpoint_every=0,
        dtype=config.dtype,
    )
    loss = DiffusionLoss(GaussianDiffusion.linear(), generator)
    label_dropout = float(getattr(model.config, "class_dropout_prob", 0.0))

    def batch(step: int) -> tuple[Tensor, ...]:
        # the global batch with every sample's draws, in the order one process draws them;
        # the trainer keeps this rank's rows of all of them
        x, y = data.batch(step, generator)
        x = x.to(dtype)
        return (x, y, *loss.draws(x, label_dropout))

    trainer = Trainer(
        model if dist is None else wrap_model(model, dist),
        settings,
        batch,
        loss_fn=loss,
        callbacks=[history, ema, evaluator, _Stamp(clock)],
        progress=progress,
        dist=dist,
    )
    outcome = trainer.fit()
    losses = np.asarray(history.values(), dtype=float)
    for start in range(0, len(losses), config.loss_every):
        window = losses[start : start + config.loss_every]
        result.add(run, seed, start + len(window), "", "batch_loss", float(window.mean()))
    if outcome.status != "ok":
        result.add(run, seed, len(losses) + 1, "", "batch_loss", math.nan)
        return outcome.status
    if timed:
        skip = evaluator.log_at | evaluator.eval_at
        for metric, value in step_rates(clock.intervals(), skip, config.warmup).items():
            result.add(run, seed, config.steps, "", metric, value)
    if evaluator.grids:
        result.data[f"{run}/seed{seed}"] = {"grids": evaluator.grids}
    return outcome.status


__all__ = ["CUSTOM", "DIT_S2_STEPS", "PAPER_EMA", "PAPER_STEPS", "PAPER_WARMUP", "DiTData",
           "DiTProtocolConfig", "build_model", "detail_ratio", "load_data", "scaled_decay",
           "scaled_warmup", "short_layer", "step_rates", "train_condition"]
