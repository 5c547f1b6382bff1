"""``ProbeCallback`` for the Hugging Face ``transformers.Trainer``.

Values reach TensorBoard, W&B, MLflow, ... through the Trainer's own reporting: when a step
has values, the callback sends them as one ``on_log`` event to the Trainer's reporting
callbacks, at that step, so each writes them as it writes the loss (TensorBoard shows them
as ``train/actlab/<metric>/<layer>``, the Trainer's prefix). The console callbacks (the
progress bar and the printer, which would print the whole dict) are left out; the console
gets one line per record instead. A callback's own ``on_log`` would see the ``logs`` dict
only after the reporters listed before it had written it, and only on the Trainer's logging
steps.

Usage::

    from actlab.integrations.transformers import ProbeCallback
    trainer = Trainer(model, args, train_dataset=data, callbacks=[ProbeCallback(every=10)])

:func:`register` (from :mod:`actlab.integrations.hidden_act`) makes ``hidden_act="actlab:SPEC"``
valid in Hugging Face configs.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any

import pandas as pd
from transformers import TrainerCallback
from transformers.trainer_callback import CallbackHandler, PrinterCallback, ProgressCallback

from actlab.errors import renamed_keywords
from actlab.integrations._session import Curvature, ProbeSession, one_line
from actlab.integrations.hidden_act import register
from actlab.train.loss_spike import SERIES, SpikeGuard

__all__ = ["Curvature", "LossSpikeCallback", "ProbeCallback", "register"]


class ProbeCallback(TrainerCallback):
    """Record :class:`~actlab.probe.Probe` statistics (and optionally curvature) while a
    ``transformers.Trainer`` trains, and log them as ``actlab/<metric>/<layer>``.

    Args:
        every: Probe schedule in optimizer steps (an int N: steps 0, N, 2N, ...; or any
            schedule :class:`~actlab.probe.Probe` accepts). With gradient accumulation one
            step is one optimizer update, and its statistics cover all its micro-batches.
        metrics: Probe metric names (default: all).
        activations: activation sites (``None``: found automatically; names, glob patterns
            or a predicate, as ``Probe(activations=...)``; its old name ``sites=`` still works
            for one release, with a ``DeprecationWarning``).
        curvature: a :class:`Curvature` schedule on a held batch, or ``None``.
        **probe_kwargs: further :class:`~actlab.probe.Probe` arguments (``weights``,
            ``blocks``, ``histograms``, ...).

    The probe runs on every process and merges their statistics on each recorded step, so
    under DDP / FSDP the values are those of the global batch; only the main process logs.
    Weight gradients are read in ``on_pre_optimizer_step`` under a process group, after the
    all-reduce and after the Trainer's gradient clipping (``max_grad_norm``). Hooks are removed at the end of training
    (:meth:`table` keeps the values); the parameters are bitwise those of a run without the
    callback.
    """

    @renamed_keywords(sites="activations")
    def __init__(self, every: Any = 10, metrics: Iterable[str] | None = None,
                 activations: Any = None,
                 *, curvature: Curvature | None = None, **probe_kwargs: Any) -> None:
        self.session = ProbeSession(every=every, metrics=metrics, activations=activations,
                                    curvature=curvature, probe_kwargs=probe_kwargs)
        self._handler: CallbackHandler | None = None
        self._pending: dict[str, float] = {}

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None,
                       **kwargs: Any) -> None:
        """Attach the probe (on every process) and find the Trainer's callback handler."""
        self._handler = _calling_handler()
        if model is not None:
            self.session.begin(model, max_steps=state.max_steps)

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Gradients are reduced across processes now, the update not yet applied."""
        self.session.before_update()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """One optimizer step ended: close it and report what is due."""
        logs = self.session.optimizer_step()
        if not logs:
            return
        if self._handler is not None:
            # the event Trainer.log sends, dispatched by the handler itself (its arguments as
            # the Trainer's version passes them) to the reporters only: not the console's
            # printers, which would print every value
            everyone = self._handler.callbacks
            self._handler.callbacks = [c for c in everyone if not isinstance(c, _NOT_REPORTERS)]
            try:
                self._handler.on_log(args, state, control, logs=logs)
            finally:
                self._handler.callbacks = everyone
            if state.is_world_process_zero:
                print(one_line(state.global_step, logs))
        else:
            self._pending.update(logs)

    def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None,
               **kwargs: Any) -> None:
        """Fallback without a handler: add pending values to the Trainer's next log."""
        if self._pending and logs is not None:
            logs.update(self._pending)
            self._pending = {}

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Remove every hook."""
        self.session.end()

    def table(self) -> pd.DataFrame:
        """All recorded values: columns step (0-based optimizer step), layer, metric, value."""
        return self.session.table()


class LossSpikeCallback(TrainerCallback):
    """Log or stop on a spike of the loss or the gradient norm (a rolling z-score,
    :class:`~actlab.train.loss_spike.SpikeGuard`) in a ``transformers.Trainer``.

    It judges the ``loss`` and ``grad_norm`` the Trainer logs (``logging_steps``: set it to 1
    to judge every step) at the step they are logged (``state.global_step``, after that
    step's update); ``action="stop"`` sets ``control.should_training_stop`` and prints one
    line naming the step and the score. Arguments as :class:`SpikeGuard`.
    """

    def __init__(self, window: int = 50, threshold: float = 6.0, warmup: int = 20,
                 action: str = "log", watch: Iterable[str] = SERIES) -> None:
        self.guard = SpikeGuard(window, threshold, warmup, action, watch)

    @property
    def events(self) -> list[dict[str, Any]]:
        """The spikes seen: ``{"step", "series", "value", "score"}``."""
        return self.guard.events

    def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None,
               **kwargs: Any) -> None:
        """Judge the logged loss and gradient norm (other log events are ignored)."""
        if not logs or "loss" not in logs:
            return
        self.guard.quiet = not state.is_world_process_zero  # only the main process prints
        stop = False
        for series in self.guard.watch:
            if series in logs:
                stop |= self.guard.observe(state.global_step, series, float(logs[series]))
        if stop:
            control.should_training_stop = True


# the console's callbacks, and the probe's own (its on_log merges values for the fallback)
_NOT_REPORTERS = (PrinterCallback, ProgressCallback, ProbeCallback)


def _calling_handler() -> CallbackHandler | None:
    """The CallbackHandler dispatching the current event (callbacks get no reference to it)."""
    frame = inspect.currentframe()
    try:
        for _ in range(6):
            frame = frame.f_back if frame is not None else None
            owner = frame.f_locals.get("self") if frame is not None else None
            if isinstance(owner, CallbackHandler):
                return owner
        return None
    finally:
        del frame
