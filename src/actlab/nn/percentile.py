"""Percentile Centering's arithmetic: selection of the percentile and its autograd functions.

The percentile is found by selection (``torch.kthvalue``, ``numpy.partition`` or the native
selection kernel, linear time) rather than a full sort, and the gradient flows through the
selected order statistics exactly as it does through ``torch.quantile`` (linear
interpolation between the two neighbouring order statistics). :func:`percentile` is the
selection as a function; :class:`_PercentileCenterScale` centres and scales in one autograd
node; :func:`_frozen_affine` and :class:`_FrozenRows` are Accumulation Stop's fixed maps.
The modules built on them live in :mod:`actlab.nn.norms`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from actlab.activations import native

_INTERPOLATIONS = ("linear", "lower", "higher", "nearest", "midpoint")


def percentile(x: Tensor, q: float, dim: int | Sequence[int] = -1, keepdim: bool = False,
               interpolation: str = "linear") -> Tensor:
    """The ``q``-quantile of ``x`` over ``dim`` by selection; same values and gradients as
    ``torch.quantile``.

    ``torch.quantile`` sorts the whole reduced axis; here ``torch.kthvalue`` selects the one
    or two order statistics that the interpolation needs. ``dim`` may be a tuple of
    dimensions (they are flattened together). ``q`` is in [0, 1].
    """
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must be in [0, 1], got {q}")
    if interpolation not in _INTERPOLATIONS:
        raise ValueError(f"interpolation must be one of {', '.join(_INTERPOLATIONS)}, got {interpolation!r}")
    dims = _normalize_dims(dim, x.dim())
    # Bring the reduced dims to the end and flatten them into one axis.
    keep = [d for d in range(x.dim()) if d not in dims]
    flat = x.permute(*keep, *dims).reshape(*[x.shape[d] for d in keep], -1)
    n = flat.shape[-1]
    if n == 0:
        raise ValueError("cannot take a percentile over an empty dimension")
    position = q * (n - 1)
    lower = math.floor(position)
    weight = position - lower
    if interpolation == "lower" or (interpolation in ("linear", "midpoint") and weight == 0.0):
        result = flat.kthvalue(lower + 1, dim=-1).values
    elif interpolation == "higher":
        result = flat.kthvalue(math.ceil(position) + 1, dim=-1).values
    elif interpolation == "nearest":
        # torch.quantile rounds half to even, as Python's round does
        result = flat.kthvalue(round(position) + 1, dim=-1).values
    else:
        below = flat.kthvalue(lower + 1, dim=-1, keepdim=True).values
        above = _next_order_statistic(flat, below, lower)
        result = torch.lerp(below, above, 0.5 if interpolation == "midpoint" else weight).squeeze(-1)
    if keepdim:
        shape = list(x.shape)
        for d in dims:
            shape[d] = 1
        result = result.reshape(shape)
    return result


def _next_order_statistic(flat: Tensor, below: Tensor, lower: int) -> Tensor:
    """The order statistic of rank ``lower + 1`` (0-based) given the one of rank ``lower``.

    The smallest element above ``below`` costs one elementwise pass, far less than a second
    selection; when ``below`` is tied so that it also fills rank ``lower + 1``, it is used.
    """
    greater = torch.where(flat > below, flat, torch.full_like(below, math.inf)).amin(-1, keepdim=True)
    tied = (flat <= below).sum(-1, keepdim=True) >= lower + 2
    return torch.where(tied, below, greater)


def _normalize_dims(dim: int | Sequence[int], ndim: int) -> tuple[int, ...]:
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    out = []
    for d in dims:
        if not -ndim <= d < ndim:
            raise ValueError(f"dim {d} out of range for a {ndim}-d tensor")
        out.append(d % ndim)
    if len(set(out)) != len(out):
        raise ValueError(f"repeated dims in {dim}")
    return tuple(sorted(out))


def _selection_plan(q: float, n: int) -> tuple[int, float]:
    """0-based rank of the lower order statistic and the interpolation weight (as quantile)."""
    position = q * (n - 1)
    lower = math.floor(position)
    return lower, position - lower


def _select_neighbours(flat: Tensor, lower: int, need_above: bool, use_numpy: bool | None = None
                       ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Order statistics of ranks ``lower`` and ``lower + 1`` of each row, with their indices.

    On the CPU one ``numpy.argpartition`` call selects both (introselect, linear time, exact
    with ties). Elsewhere ``torch.kthvalue`` selects the lower one and the upper one is the
    smallest element above it, unless ``lower`` is tied so that it also fills rank
    ``lower + 1``. Returns ``(below, below_idx, above, above_idx)`` of shape ``(rows, 1)``.
    ``use_numpy`` forces either path (``None``: numpy where it applies).
    """
    if use_numpy is None:
        use_numpy = flat.device.type == "cpu" and flat.dtype in (torch.float32, torch.float64)
    if use_numpy:
        # numpy.partition moves values only (measured 8x faster than argpartition, which
        # permutes an index array alongside), with one kth (two cost 4x more; rank lower + 1
        # is the smallest value of the part above rank lower); the positions are then found
        # by comparison (numpy's argmax on booleans stops at the first match).
        a = flat.detach().contiguous().numpy()
        part = np.partition(a, lower, axis=-1)
        below_np = part[:, lower:lower + 1]
        equal = a == below_np
        below_i = equal.argmax(-1)[:, None]
        below, below_idx = torch.from_numpy(below_np.copy()), torch.from_numpy(below_i)
        if not need_above:
            return below, below_idx, below, below_idx
        above_np = part[:, lower + 1:].min(-1, keepdims=True)
        # a tied upper neighbour is another element equal to `below` (two elements share the
        # gradient, as in torch.quantile)
        tied = (above_np == below_np)[:, 0]
        match = a == above_np
        if tied.any():
            match[tied] = equal[tied]
            match[tied, below_i[tied, 0]] = False
        return below, below_idx, torch.from_numpy(above_np), torch.from_numpy(match.argmax(-1)[:, None])
    below, below_idx = flat.kthvalue(lower + 1, dim=-1, keepdim=True)
    if not need_above:
        return below, below_idx, below, below_idx
    greater = flat > below
    above, above_idx = torch.where(greater, flat, math.inf).min(dim=-1, keepdim=True)
    # rank lower+1 is still `below` when fewer than n-lower-1 elements exceed it
    tied = greater.sum(-1, keepdim=True) < flat.shape[-1] - lower - 1
    return (below, below_idx, torch.where(tied, below, above),
            torch.where(tied, below_idx, above_idx))


class _PercentileCenterScale(torch.autograd.Function):
    """``(x - Q_q(x)) / sqrt(var(x) + eps) * w + b`` with statistics over ``(groups, n)``.

    ``layout`` is ``"last"`` (statistics over the last dim; LayerNorm flavour) or
    ``"channel"`` (statistics per channel dim 1 over all other dims; BatchNorm flavour).
    The percentile gradient goes to the one or two selected elements, weighted as in
    ``torch.quantile``'s linear interpolation; the variance gradient is the usual one. One
    hand-written backward replaces a dozen autograd nodes (this layer's speed is the point).
    """

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor | None, bias: Tensor | None, q: float, eps: float,
                layout: str):  # noqa: D102
        if layout == "last":
            n = x.shape[-1]
            flat = x.reshape(-1, n)
            bshape: list[int] = [*x.shape[:-1], 1]
        else:
            channels = x.shape[1]
            flat = x.transpose(0, 1).reshape(channels, -1)
            n = flat.shape[1]
            bshape = [1, channels] + [1] * (x.dim() - 2)
        lower, frac = _selection_plan(q, n)
        kernels = native.selection() if native.selection_usable(x) else None
        if kernels is not None:
            # one C++ pass per group: statistics, selection and output, the group in cache
            xc = x.contiguous()
            y, center, var, mean, rstd, below_idx, above_idx = kernels.percentile_norm_forward(
                xc, weight, bias, layout == "last", lower, frac, eps)
            ctx.save_for_backward(xc, weight, center, mean, rstd, below_idx, above_idx)
            ctx.mark_non_differentiable(center, var)
            ctx.meta = (layout, frac, kernels)
            return y, center, var.reshape(bshape)
        below, below_idx, above, above_idx = _select_neighbours(flat, lower, frac > 0.0)
        center = torch.lerp(below, above, frac) if frac > 0.0 else below
        if layout == "last":
            # PyTorch's fused LayerNorm gives (x - mean) * rstd, mean and rstd in one pass;
            # re-centring at the percentile is one more: x_hat = out + (mean - center) * rstd
            out, mean, rstd = torch.native_layer_norm(x, [n], None, None, eps)
            mean, rstd = mean.reshape(bshape), rstd.reshape(bshape)
            var = rstd.pow(-2) - eps
            center_b = center.reshape(bshape)
            # not addcmul: its fused rounding can push the selected element itself below zero
            x_hat = out.add_((mean - center_b) * rstd)
            if weight is not None and bias is not None:
                y = torch.addcmul(bias, x_hat, weight)
            elif weight is not None:
                y = x_hat * weight
            else:
                y = x_hat if bias is None else x_hat + bias
            saved = x_hat
        else:
            # per-channel statistics from the (C, N*S) copy the selection made: LayerNorm's
            # kernel over its rows is 3x faster than BatchNorm's training forward on NCHW,
            # and the output is then one fused pass of eval-mode BatchNorm with the
            # percentile as its mean
            _, mean, rstd = torch.native_layer_norm(flat, [n], None, None, eps)
            mean, rstd = mean.reshape(bshape), rstd.reshape(bshape)
            center_b = center.reshape(bshape)
            var = rstd.pow(-2) - eps
            y = F.batch_norm(x, center.reshape(-1), var.reshape(-1), weight, bias, False, 0.0,
                             eps)
            saved = x
        ctx.save_for_backward(saved, weight, rstd, center_b, mean, below_idx, above_idx)
        ctx.mark_non_differentiable(center, var)
        ctx.meta = (layout, frac, n, x.shape, bias is not None, eps)
        return y, center, var

    @staticmethod
    def backward(ctx, grad_y: Tensor, _grad_center: Tensor, _grad_var: Tensor):  # noqa: D102
        if len(ctx.meta) == 3:
            layout, frac, kernels = ctx.meta
            x, weight, center, mean, rstd, below_idx, above_idx = ctx.saved_tensors
            grad_x, grad_w, grad_b = kernels.percentile_norm_backward(
                grad_y, x, weight, center, mean, rstd, below_idx, above_idx, frac,
                layout == "last", ctx.needs_input_grad[1], ctx.needs_input_grad[2])
            return grad_x, grad_w, grad_b, None, None, None
        saved, weight, rstd, center, mean, below_idx, above_idx = ctx.saved_tensors
        layout, frac, n, shape, has_bias, eps = ctx.meta
        need_w = weight is not None and ctx.needs_input_grad[1]
        need_b = has_bias and ctx.needs_input_grad[2]
        need_x = ctx.needs_input_grad[0]
        grad_y = grad_y.contiguous()
        # With y_hat = (x - center) * rstd and S = sum(g_hat * y_hat) per group, the input
        # gradient is rstd * (g_hat - y_hat * S / n) - (center - mean) * rstd^2 * S / n, plus
        # the percentile's term -rstd * sum(g_hat) at the selected elements.
        if layout == "last":
            x_hat = saved
            grad_w = grad_b = None
            if need_w or need_b:
                # column sums of grad * x_hat and grad in one fused pass: LayerNorm's backward
                # of x_hat itself (mean 0, rstd 1); `weight` stands in for the bias, whose
                # values it does not read
                rows = (*shape[:-1], 1)
                _, grad_w, grad_b = torch.ops.aten.native_layer_norm_backward(
                    grad_y, x_hat, [n], x_hat.new_zeros(rows), x_hat.new_ones(rows),
                    weight, weight, [False, need_w, need_b])
            if not need_x:
                return None, grad_w, grad_b, None, None, None
            g_hat = grad_y * weight if weight is not None else grad_y.clone()
            sum_g = g_hat.sum(-1, keepdim=True)
            a = (g_hat * x_hat).sum(-1, keepdim=True).mul_(1.0 / n)
            # binary ops only: ternary ones (addcmul) with a per-row operand run 4x slower
            grad_x = g_hat.sub_(x_hat * a).sub_((center - mean) * rstd * a).mul_(rstd)
        else:
            # eval-style BatchNorm backward with the percentile as the saved mean: one pass
            # gives w * rstd * (g - mean(g) - y_hat * mean(g * y_hat)) and the per-channel
            # sums sum(g * y_hat), sum(g), which are the affine gradients and, times w, the
            # sums the input gradient needs
            w = weight if weight is not None else rstd.new_ones(shape[1])
            grad_x, s_gx, s_g = torch.ops.aten.native_batch_norm_backward(
                grad_y, saved, w, None, None, center.reshape(-1), rstd.reshape(-1), True,
                eps, [need_x, True, True])
            grad_w = s_gx if need_w else None
            grad_b = s_g if need_b else None
            if not need_x:
                return None, grad_w, grad_b, None, None, None
            bshape = center.shape
            wb = w.reshape(bshape)
            sum_g = s_g.reshape(bshape) * wb
            grad_x.add_(rstd * wb * (s_g.reshape(bshape) - (center - mean) * rstd
                                     * s_gx.reshape(bshape)) / n)
        # the percentile term reaches only the selected elements
        coef = -(sum_g * rstd).reshape(-1, 1)
        _scatter_selected(grad_x, layout, below_idx, coef * (1.0 - frac))
        if frac > 0.0:
            _scatter_selected(grad_x, layout, above_idx, coef * frac)
        return grad_x, grad_w, grad_b, None, None, None


def _frozen_affine(x: Tensor, center: Tensor, var: Tensor, weight: Tensor | None,
                   bias: Tensor | None, eps: float) -> Tensor:
    """Accumulation Stop's fixed map ``(x - center) / sqrt(var + eps) * w + b`` per channel (dim 1).

    Eval-mode BatchNorm computes exactly this map and differentiates it exactly (input,
    weight and bias), so its fused kernels do the work; no statistic is computed.
    """
    return F.batch_norm(x, center.contiguous(), var.contiguous(), weight, bias, False, 0.0, eps)


class _FrozenRows(torch.autograd.Function):
    """Accumulation Stop's fixed map for the LayerNorm flavour: ``x * scale + shift``.

    Centre, scale and affine fold into ``scale = w / sqrt(var + eps)`` and
    ``shift = b - center * scale`` (per position and feature, tiny), so the forward is one
    fused multiply-add over ``x`` and the input gradient one multiply. The affine gradients
    are LayerNorm's, with the running statistics in place of the batch's: PyTorch's fused
    LayerNorm backward computes them in one pass over ``grad`` and ``x``.
    """

    @staticmethod
    def forward(ctx, x: Tensor, center: Tensor, var: Tensor, weight: Tensor | None,
                bias: Tensor | None, eps: float) -> Tensor:  # noqa: D102
        rstd = torch.rsqrt(var + eps)
        scale = rstd * weight if weight is not None else rstd
        if bias is not None:
            shift = torch.addcmul(bias, center, scale, value=-1.0)
        else:
            shift = -center * scale
        ctx.save_for_backward(x, center, rstd, scale, weight, bias)
        return torch.addcmul(shift, x, scale)

    @staticmethod
    def backward(ctx, grad: Tensor):  # noqa: D102
        x, center, rstd, scale, weight, bias = ctx.saved_tensors
        grad = grad.contiguous()
        grad_x = grad * scale if ctx.needs_input_grad[0] else None
        grad_w = grad_b = None
        mask = [False, weight is not None and ctx.needs_input_grad[3],
                bias is not None and ctx.needs_input_grad[4]]
        if mask[1] or mask[2]:
            rows = (*x.shape[:-1], 1)
            _, grad_w, grad_b = torch.ops.aten.native_layer_norm_backward(
                grad, x.contiguous(), [x.shape[-1]], center.expand(rows).contiguous(),
                rstd.expand(rows).contiguous(), weight, bias, mask)
        return grad_x, None, None, grad_w, grad_b, None


# Below this many elements, per-call overhead dominates the frozen map: eval-mode BatchNorm
# (one ATen op, C++ backward) beats _FrozenRows (a Python autograd function), 0.84x against
# 0.55x LayerNorm's speed at (128, 128); above, _FrozenRows' lighter backward wins (1.15-1.3x
# against 0.85-0.92x at (256, 1024) and (4096, 1024); benchmarks/percentile.py).
_FROZEN_ROWS_MIN_NUMEL = 1 << 16


def _scatter_selected(grad_x: Tensor, layout: str, idx: Tensor, values: Tensor) -> None:
    """Add ``values`` (one per statistics group) at the selected positions ``idx`` of ``grad_x``."""
    if layout == "last":
        grad_x.view(-1, grad_x.shape[-1]).scatter_add_(1, idx, values)
        return
    # channel layout: flat index k of channel c is (sample k // S, spatial k % S)
    channels = grad_x.shape[1]
    spatial = grad_x[0, 0].numel()
    k = idx.reshape(-1)
    c = torch.arange(channels, device=grad_x.device)
    linear = (k // spatial) * (channels * spatial) + c * spatial + k % spatial
    grad_x.view(-1).index_add_(0, linear, values.reshape(-1).to(grad_x.dtype))
