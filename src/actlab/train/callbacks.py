"""Callbacks: what an experiment wants done while either engine trains.

A callback has a schedule (``every`` k updates and/or the update counts in ``at``; count 0
is the state before the first update) and the engine calls it only when the schedule
fires, so a callback never forces a host synchronisation on the other steps. It knows its
process rank (:attr:`Callback.rank`, set by the engine; only rank 0 writes files) and its
state (:meth:`Callback.state_dict`, JSON-able) goes into the trainer's checkpoints, so a
resumed run resumes its callbacks too. Tensor state (e.g. the shadow weights of
:class:`~actlab.train.ema.EMA`) goes through :meth:`Callback.state_tensors` into the
checkpoint's safetensors file instead.

Hooks, all optional:

* ``on_loss(trainer, step, loss)``: before the update that makes ``step`` updates, with the
  batch loss (a device tensor); may call :meth:`Callback.request_stop` (the update is skipped);
* ``on_step(trainer, step, loss)``: after ``step`` updates (``loss`` is ``None`` at 0);
* ``on_end(trainer)``: once, after training.

Example::

    log = EvalLog(lambda trainer: {"val": evaluate(trainer.model, x, y)["loss"]}, every=100)
    Trainer(model, settings, batches, callbacks=[log, DivergenceStop()]).fit()
    log.rows  # [{"step": 0, "val": ...}, {"step": 100, ...}, ...]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch import Tensor


class Callback:
    """Base class: schedule, rank, stop request and (empty) state."""

    def __init__(self, every: int = 0, at: Iterable[int] = ()) -> None:
        if every < 0:
            raise ValueError(f"every: must be >= 0, got {every}")
        self.every = int(every)
        self.at = frozenset(int(s) for s in at)
        self.rank = 0
        self.stop_reason: str | None = None

    def fires(self, step: int) -> bool:
        """True when the schedule includes update count ``step``."""
        return step in self.at or (self.every > 0 and step % self.every == 0)

    @property
    def writes(self) -> bool:
        """True on the process that writes files (rank 0)."""
        return self.rank == 0

    def request_stop(self, reason: str) -> None:
        """Ask the engine to stop training (it reports ``reason`` as the run's status)."""
        self.stop_reason = reason

    def wants_grads(self, step: int) -> bool:
        """True when the update making ``step`` updates must keep its gradients."""
        return False

    def on_loss(self, trainer: Any, step: int, loss: Tensor) -> None:
        """Before the update that makes ``step`` updates (see the module docstring)."""

    def on_step(self, trainer: Any, step: int, loss: Tensor | None) -> None:
        """After ``step`` updates (``loss``: the batch loss of that update, ``None`` at 0)."""

    def on_end(self, trainer: Any) -> None:
        """Once, after the last update."""

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps of this callback (JSON-able)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output."""

    def state_tensors(self) -> dict[str, Tensor]:
        """Tensors a checkpoint keeps of this callback (stored in the safetensors file)."""
        return {}

    def load_state_tensors(self, tensors: dict[str, Tensor]) -> None:
        """Restore :meth:`state_tensors` output (called only when there is some)."""


def fire(callbacks: Sequence[Callback], hook: str, trainer: Any, step: int,
         loss: Tensor | None) -> str | None:
    """Call ``hook`` of every callback whose schedule fires at ``step``; the first stop reason."""
    for callback in callbacks:
        if callback.fires(step):
            getattr(callback, hook)(trainer, step, loss)
    return next((c.stop_reason for c in callbacks if c.stop_reason), None)


class EveryStep(Callback):
    """A plain ``fn(step, loss)`` called after every update with the loss as a Python float
    (a host synchronisation each step: for simple hooks, not for fast paths).

    ``step`` counts updates from 1; ``zero_based=True`` passes the 0-based index of the update
    just done instead (what loops written as ``for step in range(steps)`` expect).
    """

    def __init__(self, fn: Callable[[int, float], None], zero_based: bool = False) -> None:
        super().__init__(every=1)
        self.fn = fn
        self.offset = 1 if zero_based else 0

    def fires(self, step: int) -> bool:
        """Every update (not the state before training)."""
        return step > 0

    def on_step(self, trainer: Any, step: int, loss: Tensor | None) -> None:
        """Call the function."""
        self.fn(step - self.offset, float(loss))


class EvalLog(Callback):
    """Record ``measure(trainer) -> {name: value}`` at its schedule in :attr:`rows`."""

    def __init__(self, measure: Callable[[Any], dict[str, Any]], every: int = 0,
                 at: Iterable[int] = ()) -> None:
        super().__init__(every, at)
        self.measure = measure
        self.rows: list[dict[str, Any]] = []

    def on_step(self, trainer: Any, step: int, loss: Tensor | None) -> None:
        """Measure and keep one row."""
        self.rows.append({"step": step, **self.measure(trainer)})

    def state_dict(self) -> dict[str, Any]:
        """The rows so far (values must be JSON-able)."""
        return {"rows": self.rows}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the rows."""
        self.rows = list(state.get("rows", []))


class LossLog(Callback):
    """The batch loss as a Python float at its schedule, in :attr:`rows` (syncs when it fires)."""

    def __init__(self, every: int = 0, at: Iterable[int] = ()) -> None:
        super().__init__(every, at)
        self.rows: list[dict[str, float]] = []

    def fires(self, step: int) -> bool:
        """Not before training (there is no batch loss yet)."""
        return step > 0 and super().fires(step)

    def on_step(self, trainer: Any, step: int, loss: Tensor | None) -> None:
        """Keep ``{"step", "loss"}``."""
        self.rows.append({"step": step, "loss": float(loss)})

    def state_dict(self) -> dict[str, Any]:
        """The rows so far."""
        return {"rows": self.rows}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the rows."""
        self.rows = list(state.get("rows", []))


class LossHistory(Callback):
    """Keep every update's batch loss on its device; :meth:`values` syncs once, at the end."""

    def __init__(self) -> None:
        super().__init__(every=1)
        self._losses: list[Tensor] = []
        self._restored: list[Any] = []

    def fires(self, step: int) -> bool:
        """Every update (not the state before training)."""
        return step > 0

    def on_step(self, trainer: Any, step: int, loss: Tensor | None) -> None:
        """Append the loss tensor (no host synchronisation)."""
        if loss is not None:
            self._losses.append(loss.detach())

    def values(self) -> list[Any]:
        """The losses so far as Python numbers (lists for per-member losses)."""
        return self._restored + [t.tolist() for t in self._losses]

    def state_dict(self) -> dict[str, Any]:
        """The losses so far."""
        return {"losses": self.values()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the losses."""
        self._restored, self._losses = list(state.get("losses", [])), []


class DivergenceStop(Callback):
    """Stop at the first non-finite batch loss, before its update (status ``diverged``).

    Checking needs the loss on the host, so it synchronises whenever it fires (every update
    by default; a larger ``every`` trades detection delay for fewer synchronisations).
    """

    def __init__(self, every: int = 1) -> None:
        super().__init__(every=every)
        self.loss_at_stop = math.nan

    def on_loss(self, trainer: Any, step: int, loss: Tensor) -> None:
        """Request a stop when ``loss`` is not finite."""
        value = float(loss.detach())
        if not math.isfinite(value):
            self.loss_at_stop = value
            self.request_stop("diverged")


class ProbeStep(Callback):
    """Close a :class:`actlab.Probe`'s step after every update (the probe keeps its own
    schedule of what to record); the probe's state (step, weight snapshots) goes into the
    trainer's checkpoints, so a resumed run measures drift from the original weights."""

    def __init__(self, probe: Any) -> None:
        super().__init__(every=1)
        self.probe = probe

    def fires(self, step: int) -> bool:
        """Every update (not the state before training)."""
        return step > 0

    def on_step(self, trainer: Any, step: int, loss: Tensor | None) -> None:
        """``probe.step()``."""
        self.probe.step()

    def state_dict(self) -> dict[str, Any]:
        """The probe's step counters (its snapshots go in :meth:`state_tensors`)."""
        state = self.probe.state_dict()
        return {"step": state["step"], "weights_at": state["weights_at"]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the step counters; the snapshots follow in :meth:`load_state_tensors`."""
        self._pending = dict(state)
        if not self.probe.weights:  # no snapshots: nothing else will come
            self.probe.load_state_dict({**self._pending, "weights": {}})

    def state_tensors(self) -> dict[str, Tensor]:
        """The probe's weight snapshots, as ``<layer>.<w0|w_prev|m0>``."""
        return {f"{layer}.{key}": value
                for layer, values in self.probe.state_dict()["weights"].items()
                for key, value in values.items()}

    def load_state_tensors(self, tensors: dict[str, Tensor]) -> None:
        """Restore the probe from the step counters and these snapshots."""
        weights: dict[str, dict[str, Tensor]] = {}
        for name, value in tensors.items():
            layer, key = name.rsplit(".", 1)
            weights.setdefault(layer, {})[key] = value
        self.probe.load_state_dict({**getattr(self, "_pending", {}), "weights": weights})


class CurvatureSchedule(EvalLog):
    """Curvature of some models at its schedule.

    ``targets(trainer) -> {key: (model, batch)}`` names the models to measure (e.g. a few
    ensemble members); ``measure(model, batch) -> {kind: value}`` defaults to
    :func:`top_curvature` with ``loss``. Rows hold ``step``, ``key`` and the measured kinds.
    """

    def __init__(self, targets: Callable[[Any], dict[Any, tuple[torch.nn.Module, Any]]],
                 loss: Any = None, at: Iterable[int] = (), every: int = 0, *,
                 measure: Callable[[torch.nn.Module, Any], dict[str, float]] | None = None
                 ) -> None:
        super().__init__(lambda _: {}, every, at)
        if measure is None and loss is None:
            raise ValueError("loss: needed unless a measure is given")
        self.targets = targets
        self.measure_model = measure or (lambda model, batch: top_curvature(model, batch, loss))

    def on_step(self, trainer: Any, step: int, loss: Tensor | None) -> None:
        """Measure every target model on its batch (a keyed measure also gets the key)."""
        keyed = getattr(self.measure_model, "keyed", False)
        for key, (model, batch) in self.targets(trainer).items():
            values = (self.measure_model(model, batch, key=key) if keyed
                      else self.measure_model(model, batch))
            self.rows.append({"step": step, "key": key, **values})


def top_curvature(model: torch.nn.Module, batch: Any, loss: Any, tol: float = 1e-3,
                  max_iter: int = 40) -> dict[str, float]:
    """``{"lambda_max_gn": ..., "lambda_max_hessian": ...}`` of ``model`` on one batch (Lanczos)."""
    from actlab.curvature import GaussNewtonOperator, HessianOperator, top_eigenvalues

    out = {}
    for kind, op_cls in (("lambda_max_gn", GaussNewtonOperator),
                         ("lambda_max_hessian", HessianOperator)):
        values, _, _ = top_eigenvalues(op_cls(model, loss, [batch]), k=1, method="lanczos",
                                       tol=tol, max_iter=max_iter,
                                       generator=torch.Generator().manual_seed(0))
        out[kind] = float(values[0])
    return out


class TopCurvature:
    """A keyed :class:`CurvatureSchedule` measure: the top Gauss-Newton eigenvalue and the
    top ``k`` Hessian eigenvalues, the Hessian's Lanczos warm-started from the same model's
    vectors at its previous measurement.

    Returns ``lambda_max_gn``, ``lambda_max_hessian`` (the largest), ``lambda_hessian_{i}``
    for ``i = 2..k`` and ``hessian_matvecs`` (the Hessian-vector products that Lanczos
    used, so a run shows what the warm start saves). ``warm_start=False`` starts every
    measurement from the same seeded random vector, as :func:`top_curvature` does.
    """

    keyed = True

    def __init__(self, loss: Any, k: int = 1, tol: float = 1e-3, max_iter: int = 40,
                 warm_start: bool = True) -> None:
        if k < 1:
            raise ValueError(f"k: needs at least 1, got {k}")
        self.loss, self.k, self.tol, self.warm = loss, k, tol, warm_start
        self.max_iter = max(max_iter, 2 * k)
        self.previous: dict[Any, Tensor] = {}

    def __call__(self, model: torch.nn.Module, batch: Any, key: Any = None) -> dict[str, float]:
        """Measure ``model`` on ``batch``; ``key`` names the model across measurements."""
        from actlab.curvature import GaussNewtonOperator, HessianOperator, top_eigenvalues
        from actlab.curvature import warm_start as warm_vector

        gn, _, _ = top_eigenvalues(GaussNewtonOperator(model, self.loss, [batch]), k=1,
                                   tol=self.tol, max_iter=self.max_iter,
                                   generator=torch.Generator().manual_seed(0))
        op = HessianOperator(model, self.loss, [batch])
        old = self.previous.get(key) if self.warm else None
        start = None if old is None else warm_vector(old, torch.Generator().manual_seed(0))
        values, vectors, info = top_eigenvalues(op, k=self.k, tol=self.tol,
                                                max_iter=self.max_iter, start=start,
                                                generator=torch.Generator().manual_seed(0))
        if self.warm:
            self.previous[key] = vectors.detach()
        out = {"lambda_max_gn": float(gn[0]), "lambda_max_hessian": float(values[0])}
        out.update({f"lambda_hessian_{i + 1}": float(v) for i, v in enumerate(values) if i})
        out["hessian_matvecs"] = float(info.matvecs)
        return out


class GradientAngle(Callback):
    """Angle in degrees between two groups of ensemble members' gradients at chosen updates.

    ``first`` and ``second`` are equal-length lists of member indices in the trainer's
    flat member order; :attr:`angles` maps the update count to one angle per pair.
    """

    def __init__(self, at: Iterable[int], first: Sequence[int], second: Sequence[int]) -> None:
        super().__init__(at=at)
        if len(first) != len(second):
            raise ValueError("first, second: need the same number of members")
        self.first, self.second = list(first), list(second)
        self.angles: dict[int, list[float]] = {}

    def fires(self, step: int) -> bool:
        """Only at the chosen updates (never before training)."""
        return step > 0 and step in self.at

    def wants_grads(self, step: int) -> bool:
        """Gradients are needed exactly at the chosen updates."""
        return self.fires(step)

    def on_step(self, trainer: Any, step: int, loss: Tensor | None) -> None:
        """Angle between each pair of members' flat gradients (float64)."""
        grads = trainer.last_member_grads().double()
        g0, g1 = grads[self.first], grads[self.second]
        cos = (g0 * g1).sum(1) / (g0.norm(dim=1) * g1.norm(dim=1))
        self.angles[step] = torch.rad2deg(torch.arccos(cos.clamp(-1, 1))).tolist()

    def state_dict(self) -> dict[str, Any]:
        """The angles so far."""
        return {"angles": {str(k): v for k, v in self.angles.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the angles."""
        self.angles = {int(k): v for k, v in state.get("angles", {}).items()}


class Checkpoint(Callback):
    """Save the trainer's checkpoint at its schedule (rank 0 only)."""

    def __init__(self, every: int = 0, at: Iterable[int] = ()) -> None:
        super().__init__(every, at)
        self.saved: list[int] = []

    def fires(self, step: int) -> bool:
        """Not before training."""
        return step > 0 and super().fires(step)

    def on_step(self, trainer: Any, step: int, loss: Tensor | None) -> None:
        """``trainer.save_checkpoint()`` on rank 0."""
        if self.writes:
            self.saved.append(step)
            trainer.save_checkpoint()
