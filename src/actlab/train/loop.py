"""The single-model engine: :class:`Trainer` (schedule, clipping, evaluation, callbacks, checkpoints).

:class:`Trainer` trains any module whose loss ``loss_fn(model, batch)`` returns, for a fixed
number of steps, with the settings of a :class:`~actlab.train.settings.TrainSettings`
(:class:`TrainConfig` holds the language-model defaults). Batches come from
``train_batch(step)``, a function of the step number only, so a resumed run sees exactly the
batches an uninterrupted one would, and under DDP every rank draws the same global batch and
keeps its own slice (:func:`actlab.train.distributed.shard`): N processes then compute the
same update as one.

* learning rate: linear warmup over ``warmup`` steps to ``lr``, then ``cosine``/``linear``
  decay to ``min_lr_ratio * lr`` at the last step (or ``constant``), or ``trapezoid``:
  constant, then linear down to 0 over the last ``warmdown`` steps; a param group with an
  ``lr_scale`` (Muon's) runs at ``lr_scale`` times that rate;
* the settings' optimizer from :mod:`actlab.train.optim` (``decay_vectors=False``: weight
  decay on matrices and embeddings only, not on biases and norm gains; ``muon``: the split
  of :func:`actlab.train.muon.muon_split`), global gradient-norm clipping when
  ``grad_clip > 0``;
* evaluation on ``eval_batches()`` at step 0, every ``eval_every`` steps and at the end, in
  eval mode (the model's previous mode is restored afterwards);
* ``dtype="bfloat16"`` runs forward passes under ``torch.autocast`` (parameters stay in
  float32); ``dtype="float64"`` converts the model to float64 (for exact comparisons, e.g.
  DDP against one process); ``compile=True`` runs forward passes through ``torch.compile``;
* callbacks (:mod:`actlab.train.callbacks`) fire on their schedules; a non-finite loss stops
  the run with status ``diverged`` (never an exception) through a
  :class:`~actlab.train.callbacks.DivergenceStop`;
* ``checkpoint_dir``: ``last.safetensors`` (model, optimizer state, RNG, step, history,
  callback states and tensors) every ``checkpoint_every`` steps and at the end;
  ``Trainer.fit(resume=True)`` continues from it and ends with the same parameters and
  callback states as an uninterrupted run.

The checkpoint file is :mod:`actlab.train.checkpoint`'s, the loss convention
:mod:`actlab.train.loss_fn`'s, and the step timing (:func:`measure_step`,
:func:`median_seconds`) :mod:`actlab.train.timing`'s; those names are importable from here
too, as before they moved.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from actlab.device import resolve_device
from actlab.errors import ConfigError
from actlab.train.callbacks import Callback, DivergenceStop, EveryStep, fire
from actlab.train.checkpoint import CHECKPOINT_NAME, load_checkpoint, save_checkpoint
from actlab.train.distributed import DistInfo, all_reduce_mean, shard, unwrap_model
from actlab.train.loss_fn import Batch, LossFn, default_loss
from actlab.train.muon import MUON, muon_split
from actlab.train.optim import optimizer_for
from actlab.train.settings import DTYPES, SCHEDULES, TrainSettings, choose  # noqa: F401
from actlab.train.timing import measure_step, median_seconds  # noqa: F401  (as before)

STATUS_OK = "ok"
STATUS_DIVERGED = "diverged"


@dataclass
class TrainConfig(TrainSettings):
    """:class:`~actlab.train.settings.TrainSettings` with the language-model defaults:
    AdamW (decay on matrices only), warmup + cosine decay, clipping, periodic evaluation."""

    optimizer: str = "adamw"
    steps: int = 1000
    lr: float = 1e-3
    warmup: int = 100
    schedule: str = "cosine"
    weight_decay: float = 0.1
    beta2: float = 0.95
    grad_clip: float = 1.0
    decay_vectors: bool = False
    eval_every: int = 100
    log_every: int = 10

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.steps < 1:
            raise ConfigError("steps", f"must be >= 1, got {self.steps}")


def lr_at(step: int, config: TrainSettings) -> float:
    """Learning rate for the update that follows ``step`` completed steps.

    ``trapezoid``: ``lr (step + 1) / warmup`` while ``step < warmup``, ``lr`` until the last
    ``warmdown`` steps, then ``lr (steps - step) / warmdown`` (``lr / warmdown`` for the last
    update; 0 would be the rate after it).
    """
    if config.schedule == "onecycle":
        return _one_cycle(step, config.lr, config.steps)
    if config.warmup and step < config.warmup:
        start = getattr(config, "warmup_from", 0.0)
        return config.lr * (start + (1.0 - start) * (step + 1) / config.warmup)
    if config.schedule == "constant":
        return config.lr
    if config.schedule == "trapezoid":
        left = config.steps - step
        if config.warmdown and left <= config.warmdown:
            return config.lr * max(0, left) / config.warmdown
        return config.lr
    span = max(1, config.steps - config.warmup)
    progress = min(1.0, (step - config.warmup) / span)
    floor = config.min_lr_ratio * config.lr
    if config.schedule == "linear":
        return config.lr - (config.lr - floor) * progress
    return floor + 0.5 * (config.lr - floor) * (1.0 + math.cos(math.pi * progress))


# PyTorch's OneCycleLR defaults: the rise takes 30 % of the steps from lr / 25 to lr, the fall
# ends at lr / 25 / 1e4, both cosine.
ONE_CYCLE_PCT, ONE_CYCLE_DIV, ONE_CYCLE_FINAL_DIV = 0.3, 25.0, 1e4


def _one_cycle(step: int, lr: float, steps: int) -> float:
    """``torch.optim.lr_scheduler.OneCycleLR(max_lr=lr, total_steps=steps)``'s rate after
    ``step`` updates (two cosine phases; the rise ends at step ``0.3 steps - 1``)."""
    start, floor = lr / ONE_CYCLE_DIV, lr / ONE_CYCLE_DIV / ONE_CYCLE_FINAL_DIV
    peak_step = float(ONE_CYCLE_PCT * steps) - 1
    if step <= peak_step:
        begin, end, from_lr, to_lr = 0.0, peak_step, start, lr
    else:
        begin, end, from_lr, to_lr = peak_step, float(steps - 1), lr, floor
    pct = (step - begin) / (end - begin) if end > begin else 1.0
    return to_lr + (from_lr - to_lr) / 2.0 * (math.cos(math.pi * pct) + 1.0)


def make_engine_optimizer(model: nn.Module, config: TrainSettings) -> Any:
    """The settings' optimizer over ``model``'s trainable parameters; with
    ``decay_vectors=False`` weight decay applies to parameters of 2 or more dims only (on the
    AdamW side of ``muon``, whose hidden matrices go to Muon by :func:`muon_split`)."""
    if config.optimizer == MUON:
        hidden, rest = muon_split(model)
        other = [p for _, p in rest]
        groups: list[dict[str, Any]] = [{"params": other}]
        if not config.decay_vectors:
            groups = [{"params": [p for p in other if p.dim() >= 2]},
                      {"params": [p for p in other if p.dim() < 2], "weight_decay": 0.0}]
        return optimizer_for(config, [*groups, {"params": [p for _, p in hidden], "muon": True}])
    params: list[Any] = []
    seen: set[int] = set()
    for param in model.parameters():
        if param.requires_grad and id(param) not in seen:
            seen.add(id(param))
            params.append(param)
    if not config.decay_vectors:
        params = [{"params": [p for p in params if p.dim() >= 2]},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    return optimizer_for(config, params)



@dataclass
class TrainResult:
    """Outcome of a training run: status, steps done and the logged history.

    ``history`` holds dicts with ``step`` and any of ``train_loss`` (mean over the steps
    since the previous log), ``val_loss``, ``lr``. ``losses`` holds every update's batch
    loss when the run kept them (:func:`actlab.train.supervised.train` does).
    """

    status: str
    step: int
    history: list[dict[str, float]] = field(default_factory=list)
    seconds: float = 0.0
    losses: list[float] = field(default_factory=list)
    # Host time of this fit's first update: with ``compile`` it holds the compilation.
    first_step_s: float = math.nan

    def series(self, key: str) -> list[tuple[int, float]]:
        """``(step, value)`` pairs of one logged quantity."""
        return [(int(h["step"]), float(h[key])) for h in self.history if key in h]

    @property
    def steps(self) -> int:
        """Updates done (the same as ``step``)."""
        return self.step

    @property
    def final_val_loss(self) -> float:
        """The last evaluated validation loss (nan when none)."""
        values = self.series("val_loss")
        return values[-1][1] if values else math.nan

    @property
    def final_loss(self) -> float:
        """Mean of the last 10 batch losses in ``losses`` (nan if none)."""
        tail = self.losses[-10:]
        return float(sum(tail) / len(tail)) if tail else math.nan

    @property
    def steps_per_second(self) -> float:
        """Training throughput."""
        return self.step / self.seconds if self.seconds > 0 else math.nan


class Trainer:
    """Train ``model`` for ``config.steps`` steps (see the module docstring).

    Args:
        model: the module (moved to ``dist.device``); DDP-wrap it yourself with
            :func:`actlab.train.distributed.wrap_model` when distributed.
        config: the settings (:class:`TrainConfig` for the language-model defaults, or any
            :class:`~actlab.train.settings.TrainSettings`).
        train_batch: ``step -> global batch`` (tuple of tensors, batch along dim 0).
        eval_batches: ``() -> iterable of global batches`` for the validation loss, or None.
        loss_fn: ``(model, batch) -> scalar loss``; default calls ``model(x, targets=y)``.
        dist: this process's place (default: one process on ``config.device``, which
            ``None`` makes the unit's device, see :mod:`actlab.train.placement`).
        checkpoint_dir: where ``last.safetensors`` goes (None: no checkpoints).
        callbacks: :class:`~actlab.train.callbacks.Callback` objects; a
            :class:`~actlab.train.callbacks.DivergenceStop` checking every step is added
            unless one is given.
        on_step: called as ``on_step(step, loss)`` after every update (e.g. ``probe.step``);
            it synchronises every step (prefer a callback).
        progress: wraps the step range in a progress bar, e.g. ``UnitContext.progress``.
        sharded: ``train_batch`` and ``eval_batches`` give this rank's part of each global
            batch already (a streaming loader that reads only its rows), not the whole batch.
    """

    def __init__(self, model: nn.Module, config: TrainSettings,
                 train_batch: Callable[[int], Batch],
                 eval_batches: Callable[[], Iterable[Batch]] | None = None, *,
                 loss_fn: LossFn = default_loss, dist: DistInfo | None = None,
                 checkpoint_dir: str | os.PathLike | None = None,
                 callbacks: Sequence[Callback] = (),
                 on_step: Callable[[int, float], None] | None = None,
                 progress: Callable[..., Iterable] | None = None,
                 sharded: bool = False) -> None:
        self.config = config
        self.sharded = sharded
        self.dist = dist or DistInfo(device=resolve_device(getattr(config, "device", None)))
        self.model = model.to(self.dist.device)
        if config.dtype == "float64" and any(p.dtype != torch.float64 for p in model.parameters()):
            if model is not unwrap_model(model):
                raise ValueError("dtype float64: convert the model before wrapping it in DDP")
            self.model.to(dtype=torch.float64)
        self.train_batch = train_batch
        self.eval_batches = eval_batches
        self.loss_fn = loss_fn
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir is not None else None
        self.callbacks = list(callbacks)
        if not any(isinstance(c, DivergenceStop) for c in self.callbacks):
            self.callbacks.insert(0, DivergenceStop())
        if on_step is not None:
            self.callbacks.append(EveryStep(on_step))
        for callback in self.callbacks:
            callback.rank = self.dist.rank
        self.progress = progress or (lambda it, **_: it)
        self.optimizer = make_engine_optimizer(unwrap_model(model), config)
        self._forward_model = torch.compile(model) if config.compile else model
        self.step = 0
        self.history: list[dict[str, float]] = []

    # ------------------------------------------------------------------ one step
    def _autocast(self) -> contextlib.AbstractContextManager:
        if self.config.dtype == "bfloat16":
            return torch.autocast(self.dist.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _part(self, batch: Batch) -> Batch:
        """This rank's part of a global batch (the batch itself when it is one already)."""
        return batch if self.sharded else shard(batch, self.dist)

    def _to_device(self, batch: Batch) -> Batch:
        return tuple(t.to(self.dist.device, non_blocking=True) for t in batch)

    def evaluate(self) -> float:
        """Mean loss over ``eval_batches()`` (all ranks together), in eval mode, no gradients."""
        if self.eval_batches is None:
            return math.nan
        was_training = self.model.training
        self.model.eval()
        total, count = torch.zeros((), dtype=torch.float64, device=self.dist.device), 0
        try:
            with torch.no_grad(), self._autocast():
                for batch in self.eval_batches():
                    loss = self.loss_fn(self._forward_model, self._to_device(self._part(batch)))
                    total += loss.detach().double()
                    count += 1
        finally:
            self.model.train(was_training)
        return float(all_reduce_mean(total / max(count, 1), self.dist))

    def fit(self, resume: bool = False) -> TrainResult:
        """Train to ``config.steps`` (from the checkpoint when ``resume`` and one exists)."""
        if resume:
            self.load_checkpoint()
        config = self.config
        start = time.perf_counter()
        status = STATUS_OK
        # Summed in float64 on the device: the same numbers as summing Python floats, and
        # no host synchronisation until a log line needs them.
        running = torch.zeros((), dtype=torch.float64, device=self.dist.device)
        running_n = 0
        if self.step == 0:
            if config.eval_every and self.eval_batches is not None:
                self.history.append({"step": 0, "val_loss": self.evaluate()})
            status = fire(self.callbacks, "on_step", self, 0, None) or STATUS_OK
        self.model.train()
        last = config.steps if status == STATUS_OK else self.step
        steps = self.progress(range(self.step, last), desc="train", initial=self.step,
                              total=config.steps)
        first_step_s, first = math.nan, self.step
        for step in steps:
            step_start = time.perf_counter()
            lr = lr_at(step, config)
            for group in self.optimizer.param_groups:
                group["lr"] = lr * group["lr_scale"] if "lr_scale" in group else lr
            batch = self._to_device(self._part(self.train_batch(step)))
            with self._autocast():
                loss = self.loss_fn(self._forward_model, batch)
            # float32 for reports (bfloat16 losses widened), float64 kept as it is
            reported = all_reduce_mean(loss.detach().to(_report_dtype(loss)), self.dist)
            reason = fire(self.callbacks, "on_loss", self, step + 1, reported)
            if reason is not None:
                status = reason
                self.history.append({"step": step, "train_loss": float(reported), reason: 1.0})
                break
            loss.backward()
            if config.grad_clip:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), config.grad_clip)
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.step = step + 1
            if step == first:
                first_step_s = time.perf_counter() - step_start
            running += reported.double()
            running_n += 1
            reason = fire(self.callbacks, "on_step", self, self.step, reported)
            record: dict[str, float] = {}
            if self.step % config.log_every == 0 or self.step == config.steps:
                record.update(train_loss=float(running) / running_n, lr=lr)
                running.zero_()
                running_n = 0
            if config.eval_every and (self.step % config.eval_every == 0 or self.step == config.steps):
                record["val_loss"] = self.evaluate()
                if not math.isfinite(record["val_loss"]):
                    status = STATUS_DIVERGED
            if record:
                self.history.append({"step": self.step, **record})
            if reason is not None:
                status = reason
            if status != STATUS_OK:
                break
            if config.checkpoint_every and self.step % config.checkpoint_every == 0:
                self.save_checkpoint()
        for callback in self.callbacks:
            callback.on_end(self)
        if self.checkpoint_dir is not None and status == STATUS_OK:
            self.save_checkpoint()
        return TrainResult(status, self.step, list(self.history), time.perf_counter() - start,
                           first_step_s=first_step_s)

    # ------------------------------------------------------------------ checkpoints
    @property
    def checkpoint_path(self) -> Path | None:
        """``checkpoint_dir / last.safetensors`` (None without a checkpoint folder)."""
        return None if self.checkpoint_dir is None else self.checkpoint_dir / CHECKPOINT_NAME

    def save_checkpoint(self) -> Path | None:
        """Write the checkpoint atomically (rank 0 only); return its path."""
        path = self.checkpoint_path
        if path is None or not self.dist.is_main:
            return path
        tensors = {f"callback.{i}.{name}": value for i, c in enumerate(self.callbacks)
                   for name, value in c.state_tensors().items()}
        save_checkpoint(path, unwrap_model(self.model), self.optimizer, self.step,
                        {"history": self.history, "config": asdict(self.config),
                         "callbacks": [c.state_dict() for c in self.callbacks]},
                        extra_tensors=tensors)
        return path

    def load_checkpoint(self) -> bool:
        """Restore model, optimizer, RNG, step and history if a checkpoint exists."""
        path = self.checkpoint_path
        if path is None or not path.exists():
            return False
        meta = load_checkpoint(path, unwrap_model(self.model), self.optimizer, self.dist.device)
        self.step = int(meta["step"])
        self.history = list(meta["extra"].get("history", []))
        for callback, state in zip(self.callbacks, meta["extra"].get("callbacks", [])):
            callback.load_state_dict(state)
        for i, callback in enumerate(self.callbacks):
            prefix = f"callback.{i}."
            own = {k[len(prefix):]: v for k, v in meta["tensors"].items() if k.startswith(prefix)}
            if own:
                callback.load_state_tensors(own)
        return True


def _report_dtype(loss: Tensor) -> torch.dtype:
    return torch.float64 if loss.dtype == torch.float64 else torch.float32
