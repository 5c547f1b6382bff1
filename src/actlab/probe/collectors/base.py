"""The collector protocol: one class per metric family.

A collector says which hook it needs (its ``target``), reduces the tensors of one pass to a
short raw vector *on the device* (``observe``), and turns the raw vectors of all passes of
one recorded step into metric values on the host (``combine``). ``Probe`` and
:func:`actlab.measure_once` own the hooks, the schedule and the transfer to the host; a
collector owns only its arithmetic.

Targets and the tensors ``observe`` receives after ``where`` (the site, block, module or
weight being measured):

========== ==========================================================================
``site``   ``(p, a)``: input and output of an activation site (one forward pass)
``grad``   ``(g, x_rows, fan)``: ``g = dL/dp`` at a site, row sums of the feeding Linear's
           input (or ``None``) and ``d_out * d_in`` (0 without a feeding Linear)
``block``  ``(h,)``: the output of a block (the residual stream after it)
``input``  ``(x,)``: the input of a module (e.g. an MLP's down-projection)
``weight`` ``(param, state)``: a weight and its snapshots, once per recorded step
``wgrad``  ``(grad,)``: the gradient a weight accumulated in the recorded step
========== ==========================================================================
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch

TARGETS = ("site", "grad", "block", "input", "weight", "wgrad")


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

    def combine(self, where: Any, raw: np.ndarray, meta: list[Any]) -> dict[str, float]:
        """Metric values from the stacked raw vectors of all passes (``raw[i]`` = pass ``i``)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(metrics={list(self.metrics)}, target={self.target!r})"


class FunctionMetric(Collector):
    """A user metric from a function of one pass, pooled over passes.

    ``fn`` receives the tensors of the target (``p, a`` for a site, ``h`` for a block, ``x``
    for a module input) and returns a scalar tensor. ``reduce`` pools the per-pass values:
    ``"mean"`` weighted by the number of elements of the first tensor, ``"max"``, ``"min"``
    or ``"sum"``.
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

    def combine(self, where: Any, raw: np.ndarray, meta: list[Any]) -> dict[str, float]:
        """Pool the per-pass values with ``reduce``."""
        values = raw.reshape(-1)
        if self.reduce == "mean":
            weights = np.asarray(meta, dtype=np.float64)
            value = float((values * weights).sum() / weights.sum())
        else:
            value = float(getattr(np, self.reduce)(values))
        return {self.metrics[0]: value}
