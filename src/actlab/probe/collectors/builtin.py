"""The built-in metric families (definitions in :mod:`actlab.probe.metrics` and docs/probe.md)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from actlab.probe import metrics as M
from actlab.probe.collectors.base import Collector


class ActivationForward(Collector):
    """Moments, sparsity, extremes and saturation of an activation site's input and output."""

    metrics = M.ACT_FORWARD
    target = "site"

    def observe(self, where: Any, p: torch.Tensor, a: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """:func:`~actlab.probe.metrics.forward_raw` into the site's scratch buffer."""
        scratch = where.scratch(max(p.numel(), a.numel()), p)
        raw = M.forward_raw(p, a, where.eps, where.bounds, where.tol, scratch)
        return raw, (p.numel(), a.numel())

    def combine(self, where: Any, raw: np.ndarray, meta: list[Any]) -> dict[str, float]:
        """:func:`~actlab.probe.metrics.combine_forward` over the passes."""
        counts = np.asarray(meta, dtype=np.float64)
        return M.combine_forward(raw, counts[:, 0], counts[:, 1], where.bounds is not None)


class DeadUnits(Collector):
    """Units never active (``|a| > eps``) over all passes of a step, and the one-batch estimate.

    ``dead_frac``: share of units inactive on every pass (an "ever active" mask OR-ed over
    passes); ``dead_frac_per_batch``: mean over passes of the share inactive on that pass;
    ``n_units``: units of the site. A unit is a feature of the last dimension, or a channel
    (dim 1) when the last weight layer run before the site is a convolution.
    """

    metrics = ("dead_frac", "dead_frac_per_batch", "n_units")
    target = "site"
    needs_layer_kind = True

    def observe(self, where: Any, p: torch.Tensor, a: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """Per-unit 0/1 vector: active somewhere in this pass."""
        a = a.detach()
        dim = 1 if where.after_conv and a.dim() >= 3 else -1
        active = (a.abs() > where.eps).movedim(dim, -1).reshape(-1, a.shape[dim]).any(0)
        return active.to(M.stat_dtype(a.dtype)), None

    def combine(self, where: Any, raw: np.ndarray, meta: list[Any]) -> dict[str, float]:
        """Exact share over the passes, mean one-pass share, and the unit count."""
        ever = raw.max(axis=0) > 0
        return {"dead_frac": float(1.0 - ever.mean()),
                "dead_frac_per_batch": float((1.0 - raw.mean(axis=1)).mean()),
                "n_units": float(raw.shape[1])}


class ActivationBackward(Collector):
    """Mean of ``dL/dp`` at a site and the covariance term of the drift analysis."""

    metrics = M.ACT_BACKWARD
    target = "grad"

    def observe(self, where: Any, g: torch.Tensor, x_rows: torch.Tensor | None,
                fan: int) -> tuple[torch.Tensor, Any]:
        """:func:`~actlab.probe.metrics.backward_raw`; rows and fan as metadata."""
        rows = g.numel() // max(g.shape[-1], 1) if g.dim() else 1
        return M.backward_raw(g, x_rows), (g.numel(), rows, fan)

    def combine(self, where: Any, raw: np.ndarray, meta: list[Any]) -> dict[str, float]:
        """:func:`~actlab.probe.metrics.combine_backward`; the covariance only if every pass had
        a feeding Linear."""
        info = np.asarray(meta, dtype=np.float64)
        has_cov = bool((info[:, 2] > 0).all())
        return M.combine_backward(raw, info[:, 0], info[:, 1], info[:, 2] if has_cov else None)


class HiddenMean(Collector):
    """Mean of a block's output over elements and passes."""

    metrics = M.BLOCK
    target = "block"

    def observe(self, where: Any, h: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """Sum of the block's output."""
        return M._stat_dtype(h.detach()).sum(), h.numel()

    def combine(self, where: Any, raw: np.ndarray, meta: list[Any]) -> dict[str, float]:
        """Pooled mean."""
        return {"hidden_mean": float(raw.sum() / float(sum(meta)))}


class MassiveActivation(Collector):
    """Massive activations of the residual stream after a block (Sun et al., 2024).

    ``hidden_absmax``: largest ``|h|`` over all passes; ``hidden_absmedian``: median of
    ``|h|`` over the elements of a pass, then the median over passes (exact for one pass);
    ``massive_ratio = hidden_absmax / hidden_absmedian``.
    """

    metrics = ("massive_ratio", "hidden_absmax", "hidden_absmedian")
    target = "block"

    def observe(self, where: Any, h: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """``[max |h|, median |h|]`` of one pass."""
        mag = M._stat_dtype(h.detach()).abs().reshape(-1)
        return torch.stack([mag.max(), mag.median()]), None

    def combine(self, where: Any, raw: np.ndarray, meta: list[Any]) -> dict[str, float]:
        """Largest magnitude over the median magnitude."""
        top, median = float(raw[:, 0].max()), float(np.median(raw[:, 1]))
        ratio = top / median if median > 0 else float("inf")
        return {"massive_ratio": ratio, "hidden_absmax": top, "hidden_absmedian": median}


class InputRange(Collector):
    """Range ``r = max - min`` of a module's input (an MLP's down-projection input)."""

    metrics = ("down_input_range",)
    target = "input"

    def observe(self, where: Any, x: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """``[max x, min x]`` of one pass."""
        low, high = torch.aminmax(M._stat_dtype(x.detach()))
        return torch.stack([high, low]), None

    def combine(self, where: Any, raw: np.ndarray, meta: list[Any]) -> dict[str, float]:
        """Pooled max minus pooled min."""
        return {"down_input_range": float(raw[:, 0].max() - raw[:, 1].min())}


class WeightState(Collector):
    """Moments of a weight and its drift from its initial and previously recorded values."""

    metrics = M.WEIGHT_STATE
    target = "weight"

    def observe(self, where: Any, param: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        """:func:`~actlab.probe.metrics.weight_raw_` (updates ``state.w_prev``)."""
        return M.weight_raw_(param, state.w0, state.w_prev, state.std0), state.w0.numel()

    def combine(self, where: Any, raw: np.ndarray, meta: list[Any]) -> dict[str, float]:
        """:func:`~actlab.probe.metrics.combine_weight` of the step's one record."""
        return M.combine_weight(raw[-1], meta[-1])


class WeightGrad(Collector):
    """Norm and mean of the gradient a weight accumulated in the recorded step."""

    metrics = M.WEIGHT_GRAD
    target = "wgrad"

    def observe(self, where: Any, grad: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """:func:`~actlab.probe.metrics.grad_raw`."""
        return M.grad_raw(grad), grad.numel()

    def combine(self, where: Any, raw: np.ndarray, meta: list[Any]) -> dict[str, float]:
        """:func:`~actlab.probe.metrics.combine_grad` of the last (fully accumulated) record."""
        return M.combine_grad(raw[-1], meta[-1])


BUILTIN: tuple[Collector, ...] = (ActivationForward(), ActivationBackward(), WeightState(),
                                  WeightGrad(), HiddenMean(), DeadUnits(), MassiveActivation(),
                                  InputRange())
