"""``ProbeCallback`` for Lightning (``lightning.pytorch``).

Values are logged with ``pl_module.log_dict`` as ``actlab/<metric>/<layer>`` on the step
that recorded them, so they reach every logger of the ``Trainer``. Lightning writes step
values only every ``log_every_n_steps`` batches: choose ``every`` as a multiple of it (or
``log_every_n_steps=1``) to see every recorded step.

Usage::

    from actlab.integrations.lightning import ProbeCallback
    trainer = lightning.pytorch.Trainer(callbacks=[ProbeCallback(every=10)], log_every_n_steps=10)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd
from lightning.pytorch import Callback, LightningModule, Trainer

from actlab.errors import renamed_keywords
from actlab.integrations._session import Curvature, ProbeSession
from actlab.train.loss_spike import SERIES, SpikeGuard, grad_norm

__all__ = ["Curvature", "LossSpikeCallback", "ProbeCallback"]


class ProbeCallback(Callback):
    """Record :class:`~actlab.probe.Probe` statistics (and optionally curvature) while a
    Lightning ``Trainer`` fits, and log them as ``actlab/<metric>/<layer>``.

    Args:
        every: Probe schedule in optimizer steps (``trainer.global_step``; with
            ``accumulate_grad_batches`` one step covers all its micro-batches).
        metrics: Probe metric names (default: all).
        activations: activation sites (``None``: found automatically; names, glob patterns
            or a predicate, as ``Probe(activations=...)``; its old name ``sites=`` still works
            for one release, with a ``DeprecationWarning``).
        curvature: a :class:`Curvature` schedule on a held batch; ``Curvature.loss`` is
            required here (``loss(module, batch) -> scalar``).
        **probe_kwargs: further :class:`~actlab.probe.Probe` arguments.

    The probe runs on every rank and merges their statistics on each recorded step, so under
    DDP / FSDP the values are those of the global batch; only global rank 0 logs
    (``rank_zero_only=True``). Weight gradients are read in ``on_before_optimizer_step``
    (after the all-reduce, before clipping). Hooks are removed when training ends.
    """

    @renamed_keywords(sites="activations")
    def __init__(self, every: Any = 10, metrics: Iterable[str] | None = None,
                 activations: Any = None,
                 *, curvature: Curvature | None = None, **probe_kwargs: Any) -> None:
        if curvature is not None and curvature.loss is None:
            raise ValueError("curvature.loss: required with Lightning, e.g. "
                             "Curvature(batch, loss=lambda module, b: module.loss(b))")
        self.session = ProbeSession(every=every, metrics=metrics, activations=activations,
                                    curvature=curvature, probe_kwargs=probe_kwargs)
        self._seen_step = 0

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Attach the probe (on every rank)."""
        self._seen_step = trainer.global_step
        max_steps = trainer.max_steps if trainer.max_steps and trainer.max_steps > 0 else None
        self.session.begin(pl_module, max_steps=max_steps)

    def on_before_optimizer_step(self, trainer: Trainer, pl_module: LightningModule,
                                 optimizer: Any) -> None:
        """Gradients are reduced across ranks now, the update not yet applied."""
        self.session.before_update()

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        """After an optimizer step (not after accumulation micro-batches): log what is due."""
        if trainer.global_step == self._seen_step:
            return
        self._seen_step = trainer.global_step
        logs = self.session.optimizer_step()
        if logs:
            pl_module.log_dict(logs, on_step=True, on_epoch=False, rank_zero_only=True)

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Remove every hook."""
        self.session.end()

    def table(self) -> pd.DataFrame:
        """All recorded values: columns step (0-based optimizer step), layer, metric, value."""
        return self.session.table()


class LossSpikeCallback(Callback):
    """Log or stop on a spike of the loss or the gradient norm (a rolling z-score,
    :class:`~actlab.train.loss_spike.SpikeGuard`) in a Lightning ``Trainer``.

    The gradient norm is read in ``on_before_optimizer_step`` (after the all-reduce, before
    clipping; one host synchronisation per step), the loss (the ``training_step`` output)
    in ``on_train_batch_end``; both are judged at ``trainer.global_step`` after the update.
    ``action="stop"`` sets ``trainer.should_stop`` and prints one line naming the step and
    the score. Arguments as :class:`SpikeGuard`. Under DDP every rank judges the same
    gradient norm but its own loss: log the ranks' mean loss in ``training_step`` (or watch
    only ``grad_norm``) so that every rank stops together.
    """

    def __init__(self, window: int = 50, threshold: float = 6.0, warmup: int = 20,
                 action: str = "log", watch: Iterable[str] = SERIES) -> None:
        self.guard = SpikeGuard(window, threshold, warmup, action, watch)
        self._grad_norm: float | None = None
        self._seen_step = 0

    @property
    def events(self) -> list[dict[str, Any]]:
        """The spikes seen: ``{"step", "series", "value", "score"}``."""
        return self.guard.events

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Start counting steps where the trainer is (a resumed run)."""
        self._seen_step = trainer.global_step

    def on_before_optimizer_step(self, trainer: Trainer, pl_module: LightningModule,
                                 optimizer: Any) -> None:
        """The gradient is complete (and reduced): take its norm."""
        if "grad_norm" in self.guard.watch:
            self._grad_norm = grad_norm(pl_module.parameters())

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        """After an optimizer step: judge its loss and gradient norm."""
        if trainer.global_step == self._seen_step:
            return
        self._seen_step = step = trainer.global_step
        self.guard.quiet = not trainer.is_global_zero  # only rank 0 prints
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        stop = False
        if loss is not None:
            stop |= self.guard.observe(step, "loss", float(loss.detach().float().mean()))
        if self._grad_norm is not None:
            stop |= self.guard.observe(step, "grad_norm", self._grad_norm)
            self._grad_norm = None
        if stop:
            trainer.should_stop = True
