"""A guard against loss spikes: a rolling z-score of the loss and of the gradient norm.

:class:`SpikeGuard` holds the arithmetic shared by the engine's :class:`LossSpikeCallback`
and the Hugging Face / Lightning callbacks of the same name (:mod:`actlab.integrations`).
For each watched series (``loss``, ``grad_norm``) it keeps the last ``window`` values that
were not spikes and scores a new value ``x`` as

    ``z = (x - mean) / std``   (``mean``, population ``std`` of the window),

one-sided: only a rise counts. Once ``warmup`` values are in the window, a value with
``z > threshold`` is a spike; it is recorded in :attr:`SpikeGuard.events` and kept out of
the window (so one spike does not widen the band that judges the next values). A
non-finite value is a spike with ``z = inf`` even during warm-up; a window with ``std = 0``
scores any rise ``inf``. ``action="log"`` records and logs each spike (``logging`` at
warning level); ``action="stop"`` also stops the run and prints one line naming the step
and the score. The defaults (window 50, threshold 6, warm-up 20) are ours (``actlab``).

Engine use::

    from actlab.train.loss_spike import LossSpikeCallback
    Trainer(model, settings, batches, callbacks=[LossSpikeCallback(action="stop")]).fit()
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor

from actlab.errors import ConfigError
from actlab.train.callbacks import Callback

log = logging.getLogger("actlab")

ACTIONS = ("log", "stop")
SERIES = ("loss", "grad_norm")


class SpikeGuard:
    """Rolling one-sided z-scores of named series and the spikes they flagged.

    Args:
        window: number of past (non-spike) values the mean and std are taken over (>= 2).
        threshold: a value scoring above it is a spike (> 0).
        warmup: values needed in the window before it judges (2 <= warmup <= window).
        action: ``"log"`` or ``"stop"``.
        watch: the series judged, from ``("loss", "grad_norm")``.
        name: the name the messages start with.
    """

    def __init__(
        self,
        window: int = 50,
        threshold: float = 6.0,
        warmup: int = 20,
        action: str = "log",
        watch: Iterable[str] = SERIES,
        name: str = "LossSpikeCallback",
    ) -> None:
        if isinstance(window, bool) or not isinstance(window, int) or window < 2:
            raise ConfigError("window", f"must be an integer >= 2, got {window!r}")
        if isinstance(warmup, bool) or not isinstance(warmup, int) or not 2 <= warmup <= window:
            raise ConfigError(
                "warmup", f"must be an integer in [2, window={window}], got {warmup!r}"
            )
        if not isinstance(threshold, (int, float)) or not threshold > 0:
            raise ConfigError("threshold", f"must be a number > 0, got {threshold!r}")
        if action not in ACTIONS:
            raise ConfigError("action", f"must be one of {ACTIONS}, got {action!r}")
        watched = (watch,) if isinstance(watch, str) else tuple(watch)
        unknown = [w for w in watched if w not in SERIES]
        if unknown or not watched:
            raise ConfigError("watch", f"must name some of {SERIES}, got {watched!r}")
        self.window, self.threshold, self.warmup = window, float(threshold), warmup
        self.action, self.watch, self.name = action, watched, name
        self.history: dict[str, deque[float]] = {s: deque(maxlen=window) for s in watched}
        #: every spike: ``{"step", "series", "value", "score"}``
        self.events: list[dict[str, Any]] = []
        #: the stop message when ``action="stop"`` fired, else ``None``
        self.stopped: str | None = None
        #: set on the processes that should not print or log (ranks other than 0)
        self.quiet = False

    def score(self, series: str, value: float) -> float:
        """The z-score of ``value`` against the window of ``series`` (NaN during warm-up)."""
        if not math.isfinite(value):
            return math.inf
        past = self.history[series]
        if len(past) < self.warmup:
            return math.nan
        mean = math.fsum(past) / len(past)
        std = math.sqrt(math.fsum((v - mean) ** 2 for v in past) / len(past))
        if std == 0:
            return math.inf if value > mean else 0.0
        return (value - mean) / std

    def observe(self, step: int, series: str, value: float) -> bool:
        """Judge ``value`` of ``series`` at ``step``; True when the run should stop."""
        if series not in self.history:
            return False
        value = float(value)
        z = self.score(series, value)
        if not z > self.threshold:  # NaN (warm-up) is not a spike
            self.history[series].append(value)
            return False
        self.events.append({"step": int(step), "series": series, "value": value, "score": z})
        if self.action == "stop":
            self.stopped = (
                f"{self.name}: stopping at step {step}: {series} z-score {z:.2f} "
                f"> {self.threshold:g} (value {value:.6g}, window {self.window})"
            )
            if not self.quiet:
                print(self.stopped)
            return True
        if self.quiet:
            return False
        log.warning(
            "%s: %s spike at step %d: z-score %.2f > %g (value %.6g)",
            self.name,
            series,
            step,
            z,
            self.threshold,
            value,
        )
        return False

    def state_dict(self) -> dict[str, Any]:
        """The windows and the events (JSON-able)."""
        return {
            "history": {k: list(v) for k, v in self.history.items()},
            "events": list(self.events),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output."""
        for key, values in state.get("history", {}).items():
            if key in self.history:
                self.history[key] = deque(values, maxlen=self.window)
        self.events = list(state.get("events", []))


def grad_norm(parameters: Iterable[torch.nn.Parameter]) -> float:
    """The global L2 norm of the parameters' ``.grad`` (one host synchronisation)."""
    grads = [p.grad.detach() for p in parameters if p.grad is not None]
    if not grads:
        return math.nan
    return float(
        torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.double()) for g in grads]))
    )


class LossSpikeCallback(Callback):
    """Stop (or log) when the loss or the gradient norm spikes (see :mod:`this module
    <actlab.train.loss_spike>` for the score); for :class:`~actlab.train.loop.Trainer`.

    The loss is judged in ``on_loss``, before its update: a stop skips the spiking update
    (the run's status is ``"loss_spike"``). The gradient norm (before clipping) is summed
    on the device by hooks on the model's parameters as the backward pass accumulates it,
    and judged in ``on_step``, after its update. Under a process group a hook would see the
    local gradient before its reduction, so there the gradient norm is not watched (a
    warning says so); the loss the engine reports is the ranks' mean, so every rank takes
    the same decision. Both judgements read a value on the host: one synchronisation per
    update.
    """

    def __init__(
        self,
        window: int = 50,
        threshold: float = 6.0,
        warmup: int = 20,
        action: str = "log",
        watch: Iterable[str] = SERIES,
    ) -> None:
        super().__init__(every=1)
        self.guard = SpikeGuard(window, threshold, warmup, action, watch)
        self._sumsq: Tensor | None = None
        self._handles: list[Any] = []

    @property
    def events(self) -> list[dict[str, Any]]:
        """The spikes seen: ``{"step", "series", "value", "score"}``."""
        return self.guard.events

    def fires(self, step: int) -> bool:
        """Every update (not the state before training)."""
        return step > 0

    def _hook(self, trainer: Any) -> None:
        if "grad_norm" not in self.guard.watch or self._handles or self._sumsq is not None:
            return
        if (
            torch.distributed.is_available()
            and torch.distributed.is_initialized()
            and torch.distributed.get_world_size() > 1
        ):
            import warnings

            warnings.warn(
                "LossSpikeCallback: under a process group the engine's gradient norm "
                "is not watched (only the loss)",
                stacklevel=3,
            )
            self._sumsq = torch.zeros(())
            return
        params = [p for p in trainer.model.parameters() if p.requires_grad]
        if not params:
            self._sumsq = torch.zeros(())
            return
        self._sumsq = torch.zeros((), dtype=torch.float64, device=params[0].device)

        def add(param: Tensor) -> None:
            if param.grad is not None:
                self._sumsq += param.grad.detach().double().square().sum()

        self._handles = [p.register_post_accumulate_grad_hook(add) for p in params]

    def on_loss(self, trainer: Any, step: int, loss: Tensor) -> None:
        """Judge the batch loss; a stop skips this update."""
        self.guard.quiet = not self.writes  # only rank 0 prints
        self._hook(trainer)
        if self._handles:
            self._sumsq.zero_()
        if self.guard.observe(step, "loss", float(loss.detach().float().mean())):
            self.request_stop("loss_spike")

    def on_step(self, trainer: Any, step: int, loss: Tensor | None) -> None:
        """Judge the gradient norm of the update just made."""
        if self._handles and self.guard.observe(step, "grad_norm", math.sqrt(float(self._sumsq))):
            self.request_stop("loss_spike")

    def on_end(self, trainer: Any) -> None:
        """Remove the gradient hooks."""
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def state_dict(self) -> dict[str, Any]:
        """The guard's windows and events."""
        return self.guard.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the guard."""
        self.guard.load_state_dict(state)
