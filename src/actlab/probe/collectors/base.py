"""The collector protocol: one class per metric family.

A collector says which hook it needs (its ``target``), reduces the tensors of one pass to a
short raw vector *on the device* (``observe``), pools the raw vectors of all passes of one
recorded step into sufficient statistics on the host (``stats``, :mod:`actlab.probe.merge`:
each statistic names how it merges, so ranks merge exactly), and turns merged statistics into
metric values (``finish``). A collector that implements only ``combine`` (raw vectors to
values) works on one process but cannot merge across ranks. ``Probe`` and
:func:`actlab.measure_once` own the hooks, the schedule and the transfer to the host; a
collector owns only its arithmetic.

Targets and the tensors ``observe`` receives after ``where`` (the site, block, module or
weight being measured):

=========== ==========================================================================
``site``    ``(p, a)``: input and output of an activation site (one forward pass)
``grad``    ``(g, x_rows, fan)``: ``g = dL/dp`` at a site, row sums of the feeding Linear's
            input (or ``None``) and ``d_out * d_in`` (0 without a feeding Linear)
``outgrad`` ``(h,)``: ``h = dL/da`` at a site's output (eager models only)
``block``   ``(h,)``: the output of a block (the residual stream after it)
``input``   ``(x,)``: the input of a module (e.g. an MLP's down-projection)
``weight``  ``(param, state)``: a weight and its snapshots, once per recorded step
``wgrad``   ``(grad,)``: the gradient a weight accumulated in the recorded step
=========== ==========================================================================
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch

from actlab.probe.merge import Stat, Stats

TARGETS = ("site", "grad", "outgrad", "block", "input", "weight", "wgrad")


class Collector:
    """Base class of a metric family.

    Subclasses set ``metrics`` (the names they produce) and ``target`` (one of
    :data:`TARGETS`), and implement :meth:`observe` and :meth:`combine`. ``observe`` runs
    inside a hook: it must not move data to the host or call ``.item()``.
    """

    metrics: ClassVar[tuple[str, ...]] = ()
    target: ClassVar[str] = "site"
    #: set when ``observe`` reads ``where.after_conv`` (the unit is a conv channel)
    needs_layer_kind: ClassVar[bool] = False

    def observe(self, where: Any, *tensors: Any) -> tuple[torch.Tensor, Any]:
        """Raw device-side statistics of one pass, and any host-side metadata (e.g. counts)."""
        raise NotImplementedError

    def stats(self, where: Any, raw: np.ndarray, meta: list[Any]) -> Stats:
        """Mergeable sufficient statistics of all passes of a step (``raw[i]`` = pass ``i``).

        Override it together with :meth:`finish` to make the collector work across ranks.
        """
        raise NotImplementedError(f"{type(self).__name__} defines no mergeable statistics")

    def finish(self, where: Any, stats: Stats) -> dict[str, float]:
        """Metric values from (merged) :meth:`stats`."""
        raise NotImplementedError(f"{type(self).__name__} defines no mergeable statistics")

    def combine(self, where: Any, raw: np.ndarray, meta: list[Any]) -> dict[str, float]:
        """Metric values from the stacked raw vectors of all passes (``raw[i]`` = pass ``i``)."""
        return self.finish(where, self.stats(where, raw, meta))

    @property
    def mergeable(self) -> bool:
        """True when the statistics merge across ranks (:meth:`stats` is implemented)."""
        return type(self).stats is not Collector.stats

    def __repr__(self) -> str:
        return f"{type(self).__name__}(metrics={list(self.metrics)}, target={self.target!r})"


class FunctionMetric(Collector):
    """A user metric from a function of one pass, pooled over passes (and ranks).

    ``fn`` receives the tensors of the target (``p, a`` for a site, ``h`` for a block, ``x``
    for a module input) and returns a scalar tensor. ``reduce`` pools the per-pass values,
    and across ranks the per-rank values, the same way: ``"mean"`` weighted by the number of
    elements of the first tensor, ``"max"``, ``"min"`` or ``"sum"``.
    """

    REDUCTIONS = ("mean", "max", "min", "sum")

    def __init__(self, name: str, fn: Any, target: str, reduce: str) -> None:
        self.metrics = (name,)  # type: ignore[misc]  # per instance
        self.target = target  # type: ignore[misc]
        self.fn = fn
        self.reduce = reduce

    def observe(self, where: Any, *tensors: Any) -> tuple[torch.Tensor, Any]:
        """``fn`` on detached tensors; the element count of the first is the weight."""
        args = [t.detach() if isinstance(t, torch.Tensor) else t for t in tensors]
        value = torch.as_tensor(self.fn(*args))
        return value.detach().reshape(()).to(torch.float64), args[0].numel()

    def stats(self, where: Any, raw: np.ndarray, meta: list[Any]) -> Stats:
        """``mean``: weighted sum and total weight (summed); else the ``reduce`` of the values."""
        values = raw.reshape(-1)
        if self.reduce == "mean":
            weights = np.asarray(meta, dtype=np.float64)
            return {"value": Stat("sum", [(values * weights).sum(), weights.sum()])}
        return {"value": Stat(self.reduce, getattr(np, self.reduce)(values, keepdims=True))}

    def finish(self, where: Any, stats: Stats) -> dict[str, float]:
        """The pooled value."""
        value = stats["value"].value
        return {self.metrics[0]: float(value[0] / value[1] if self.reduce == "mean"
                                       else value[0])}
