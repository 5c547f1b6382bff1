"""Normalization layers: RMSNorm and Percentile Centering with Accumulation Stop.

Percentile Centering (PC) shifts features by their ``q``-th percentile instead of their
mean, ``x_hat = (x - Q_x(q)) / sqrt(var_x + eps)``, so that a following ReLU zeroes a
fraction ``q`` of its inputs. The percentile is found by selection (``torch.kthvalue``,
linear time) rather than a full sort, and the gradient flows through the selected order
statistics exactly as it does through ``torch.quantile`` (linear interpolation between
the two neighbouring order statistics).

Both flavours keep an exponential moving average of their statistics, like BatchNorm's
running statistics. With ``freeze_after=T`` they apply *Accumulation Stop*: after ``T``
training steps the running statistics are frozen and used from then on, and no batch
statistics are computed any more (the layer becomes a fixed affine map).

:func:`make_norm` builds any supported normalization from a short name.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from actlab.activations import native
from actlab.activations.grammar import split_spec
from actlab.activations.running import check_freeze_after, check_momentum, resolve_momentum
from actlab.errors import did_you_mean

_INTERPOLATIONS = ("linear", "lower", "higher", "nearest", "midpoint")
DEFAULT_MOMENTUM = 0.1  # BatchNorm's, when no freeze_after sets one


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


class RMSNorm(nn.Module):
    """Root-mean-square normalization without centering: ``x / sqrt(mean(x^2) + eps) * w``.

    Normalizes over the last dimension (``dim`` features), as in "Bug or Feature²" App. D.1
    (``eps = 1e-6``, learned scale ``w``). It does not subtract the mean, so it does not
    counteract weight drift the way LayerNorm and BatchNorm do.
    """

    def __init__(self, dim: int, eps: float = 1e-6, affine: bool = True) -> None:
        super().__init__()
        self.dim = dim
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim)) if affine else None

    def forward(self, x: Tensor) -> Tensor:
        """Normalize ``x`` over its last dimension."""
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return y * self.weight if self.weight is not None else y

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}"


class _PercentileNorm(nn.Module):
    """Shared machinery of the two Percentile Centering flavours (see the module docstring)."""

    def __init__(self, num_features: int, q: float = 0.5, eps: float = 1e-5,
                 momentum: float | None = None, freeze_after: int | None = None,
                 affine: bool = True, bias: bool = True) -> None:
        super().__init__()
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"q must be in [0, 1], got {q}")
        # One meaning and range for both options (actlab.activations.running): the default
        # momentum is BatchNorm's 0.1, or min(1, 5 / freeze_after) with Accumulation Stop.
        if freeze_after is not None:
            freeze_after = check_freeze_after(freeze_after)
        self.num_features = num_features
        self.q = float(q)
        self.eps = eps
        self.momentum = float(resolve_momentum(momentum, freeze_after, DEFAULT_MOMENTUM))
        self.freeze_after = freeze_after
        self.weight = nn.Parameter(torch.ones(num_features)) if affine else None
        self.bias = nn.Parameter(torch.zeros(num_features)) if affine and bias else None
        self.register_buffer("num_batches_tracked", torch.zeros((), dtype=torch.long))
        self.stats_computed = 0  # dynamic statistic computations (not saved; for tests/benchmarks)

    # -- Accumulation Stop ---------------------------------------------------------------
    @property
    def frozen(self) -> bool:
        """Whether Accumulation Stop is in effect (running statistics used, none computed)."""
        return self.freeze_after is not None and int(self.num_batches_tracked) >= self.freeze_after

    def freeze(self) -> None:
        """Apply Accumulation Stop now, whatever ``freeze_after`` says."""
        self.freeze_after = int(self.num_batches_tracked)

    def _update(self, running: Tensor, value: Tensor) -> None:
        running.lerp_(value.detach().to(running.dtype), self.momentum)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, q={self.q}, eps={self.eps}, momentum={self.momentum}, "
                f"freeze_after={self.freeze_after}")


class PercentileBatchNorm(_PercentileNorm):
    """BatchNorm flavour of Percentile Centering: per-channel statistics over the batch.

    Accepts ``(N, C)``, ``(N, C, L)`` or ``(N, C, H, W)``; channel ``C`` is dim 1. In training
    each channel is shifted by its ``q``-th percentile over ``(N, *spatial)`` and scaled by its
    (biased) variance; running estimates (EMA with ``momentum``, unbiased variance, as
    ``nn.BatchNorm``) are used in eval mode and, after ``freeze_after`` training steps,
    in training too (Accumulation Stop).
    """

    def __init__(self, num_features: int, q: float = 0.5, eps: float = 1e-5,
                 momentum: float | None = None, freeze_after: int | None = None,
                 affine: bool = True, bias: bool = True) -> None:
        super().__init__(num_features, q, eps, momentum, freeze_after, affine, bias)
        self.register_buffer("running_center", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))

    def forward(self, x: Tensor) -> Tensor:
        """Percentile-center and scale ``x`` per channel."""
        if x.dim() < 2 or x.shape[1] != self.num_features:
            raise ValueError(f"expected (N, {self.num_features}, ...) input, got {tuple(x.shape)}")
        if not self.training or self.frozen:
            return _frozen_affine(x, self.running_center, self.running_var, self.weight,
                                       self.bias, self.eps)
        y, center, var = _PercentileCenterScale.apply(x, self.weight, self.bias, self.q, self.eps,
                                                      "channel")
        self.stats_computed += 1
        with torch.no_grad():
            n = x.numel() // self.num_features
            self._update(self.running_center, center.reshape(-1))
            self._update(self.running_var, var.reshape(-1) * n / max(n - 1, 1))
            self.num_batches_tracked += 1
        return y


class PercentileLayerNorm(_PercentileNorm):
    """LayerNorm flavour of Percentile Centering: per-sample statistics over the last dim.

    Each row of ``num_features`` features (a sample, or a token) is shifted by its own
    ``q``-th percentile and scaled by its (biased) variance. The running estimates average
    the per-row statistics over the batch dimension (dim 0), keeping one value per remaining
    position (e.g. per token for ``(B, T, D)`` input; inputs must then have a fixed size),
    with an EMA. Eval mode computes per-row statistics like LayerNorm; once frozen by
    Accumulation Stop, the running estimates are used in training and eval alike.
    """

    def __init__(self, num_features: int, q: float = 0.5, eps: float = 1e-5,
                 momentum: float | None = None, freeze_after: int | None = None,
                 affine: bool = True, bias: bool = True) -> None:
        super().__init__(num_features, q, eps, momentum, freeze_after, affine, bias)
        # Shape (positions..., 1); sized on the first training batch.
        self.register_buffer("running_center", torch.zeros(1))
        self.register_buffer("running_var", torch.ones(1))

    def forward(self, x: Tensor) -> Tensor:
        """Percentile-center and scale ``x`` over its last dimension."""
        if x.shape[-1] != self.num_features:
            raise ValueError(f"expected last dim {self.num_features}, got {tuple(x.shape)}")
        if self.frozen:
            if (x.dim() == 2 and self.running_center.numel() == 1
                    and x.numel() < _FROZEN_ROWS_MIN_NUMEL):
                # one statistic for all rows, a per-feature map: on small inputs eval-mode
                # BatchNorm, one fused op with a C++ backward, has the least overhead
                return _frozen_affine(x, self.running_center.expand(self.num_features),
                                      self.running_var.expand(self.num_features),
                                      self.weight, self.bias, self.eps)
            return _FrozenRows.apply(x, self.running_center, self.running_var, self.weight,
                                     self.bias, self.eps)
        y, center, var = _PercentileCenterScale.apply(x, self.weight, self.bias, self.q, self.eps,
                                                      "last")
        center = center.reshape(var.shape)
        self.stats_computed += 1
        if self.training:
            with torch.no_grad():
                stat_shape = tuple(x.shape[1:-1]) + (1,)
                if tuple(self.running_center.shape) != stat_shape:
                    if int(self.num_batches_tracked) > 0:
                        raise ValueError(f"input positions {stat_shape[:-1]} differ from the running "
                                         f"statistics' {tuple(self.running_center.shape[:-1])}")
                    self.running_center = torch.zeros(stat_shape, device=x.device, dtype=x.dtype)
                    self.running_var = torch.ones(stat_shape, device=x.device, dtype=x.dtype)
                self._update(self.running_center, center.mean(0))
                self._update(self.running_var, var.mean(0))
                self.num_batches_tracked += 1
        return y

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):  # noqa: D401
        # Running statistics are sized lazily; take the saved shape.
        for name in ("running_center", "running_var"):
            saved = state_dict.get(prefix + name)
            if saved is not None and saved.shape != getattr(self, name).shape:
                setattr(self, name, torch.empty_like(saved))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


class FlattenBatch(nn.Module):
    """Apply a batch-statistics norm to features in the last dim of ``(..., D)`` input.

    Leading dims are flattened into the batch, so ``(B, T, D)`` tokens are normalized
    per feature over all ``B * T`` tokens.
    """

    def __init__(self, norm: nn.Module) -> None:
        super().__init__()
        self.norm = norm

    def forward(self, x: Tensor) -> Tensor:
        """Normalize ``(..., D)`` per feature over every leading position."""
        if x.dim() == 2:
            return self.norm(x)
        return self.norm(x.reshape(-1, x.shape[-1])).reshape(x.shape)


class ChannelsLast(nn.Module):
    """Apply a last-dim norm (LayerNorm, RMSNorm, PercentileLayerNorm) to channel dim 1."""

    def __init__(self, norm: nn.Module) -> None:
        super().__init__()
        self.norm = norm

    def forward(self, x: Tensor) -> Tensor:
        """Normalize ``(N, C, ...)`` over ``C`` at every position; the output is contiguous."""
        # Moved back, the norm's output has channels-last strides, so the convolutions after
        # it would run oneDNN's channels-last kernels. With torch 2.13 (oneDNN 3.12) on AVX2,
        # the weight gradient of a 1x1 stride-2 convolution with fewer than 8 input channels
        # in that layout is wrong on two threads and writes past its workspace on one,
        # corrupting the heap (oneDNN issue #6035; a ResNet shortcut from 4 channels hit
        # it). A contiguous (N, C, ...) output keeps convolutions on their default layout.
        return self.norm(x.movedim(1, -1)).movedim(-1, 1).contiguous()


NORM_NAMES = ("none", "rmsnorm", "layernorm", "batchnorm", "percentile",
              "percentile-layernorm", "percentile-batchnorm")
_NORM_OPTIONS = {"q": float, "freeze_after": int, "momentum": float, "eps": float}
_RUNNING_CHECKS = {"freeze_after": check_freeze_after, "momentum": check_momentum}


def parse_norm(spec: str) -> tuple[str, dict[str, float | int]]:
    """Split ``"percentile:q=0.7:freeze_after=100"`` into a name and options.

    The grammar is the activations' (:func:`~actlab.activations.grammar.split_spec`). The old
    comma form (``percentile:q=0.7,freeze_after=100``) is still read, with a
    ``DeprecationWarning``. Unknown names or options raise ``ValueError`` naming the
    closest valid ones.
    """
    if isinstance(spec, str) and "," in spec:
        colon_form = spec.replace(",", ":")
        warnings.warn(f"norm spec {spec!r}: separate options with ':' ({colon_form!r}); "
                      "the comma form is deprecated", DeprecationWarning, stacklevel=2)
        spec = colon_form
    name, pieces = split_spec(spec, "norm")
    if name not in NORM_NAMES:
        raise ValueError(f"unknown norm {name!r}{did_you_mean(name, NORM_NAMES, prefix='; ')} "
                         f"(valid: {', '.join(NORM_NAMES)})")
    options: dict[str, float | int] = {}
    for key, value in pieces:
        if value is None or key not in _NORM_OPTIONS:
            hint = did_you_mean(key, _NORM_OPTIONS, n=2, prefix="; ")
            raise ValueError(f"bad norm option {key!r} in {spec!r}{hint} "
                             f"(valid: {', '.join(f'{k}=...' for k in _NORM_OPTIONS)})")
        try:
            options[key] = _NORM_OPTIONS[key](value)
        except ValueError:
            raise ValueError(f"norm option {key} needs a {_NORM_OPTIONS[key].__name__}, got {value!r}") from None
        if key in _RUNNING_CHECKS:  # the range every running statistic shares
            try:
                options[key] = _RUNNING_CHECKS[key](options[key])
            except ValueError as exc:
                raise ValueError(f"norm spec {spec!r}: {exc}") from None
    if options and not name.startswith("percentile") and set(options) - {"eps", "momentum"}:
        raise ValueError(f"options {sorted(options)} only apply to percentile norms, got {spec!r}")
    return name, options


def make_norm(name: str, dim: int, *, channels_first: bool = False, bias: bool = True,
              affine: bool = True, **overrides: float | int | None) -> nn.Module:
    """Build a normalization for ``dim`` features (or channels) from its name.

    ``name`` is one of ``none``, ``rmsnorm``, ``layernorm``, ``batchnorm``, ``percentile``
    (LayerNorm flavour for features/tokens, BatchNorm flavour for ``channels_first`` maps),
    ``percentile-layernorm``, ``percentile-batchnorm``, with optional ``:q=..,freeze_after=..``.
    ``channels_first`` says the input is ``(N, C, ...)`` (conv feature maps); else features are
    the last dim. ``bias=False`` drops the learned shift of the percentile norms (so the
    imposed sparsity level cannot be trained away). ``affine=False`` drops every learned
    scale and shift (LayerNorm's ``elementwise_affine=False``; used where a conditioning
    network supplies them, as in DiT's adaLN). ``overrides`` (e.g. ``q``) win over the
    options in ``name``.
    """
    kind, options = parse_norm(name)
    options.update({k: v for k, v in overrides.items() if v is not None})
    if kind == "none":
        return nn.Identity()
    if kind == "percentile":
        kind = "percentile-batchnorm" if channels_first else "percentile-layernorm"
    if kind in ("batchnorm", "percentile-batchnorm"):
        if kind == "batchnorm":
            bn_options = {k: v for k, v in options.items() if k in ("eps", "momentum")}
            norm: nn.Module = (nn.BatchNorm2d if channels_first else nn.BatchNorm1d)(
                dim, affine=affine, **bn_options)
        else:
            norm = PercentileBatchNorm(dim, affine=affine, bias=bias, **options)
        # Conv maps are (N, C, ...) already; features/tokens are flattened to (N*, D).
        return norm if channels_first else FlattenBatch(norm)
    if kind == "percentile-layernorm":
        norm = PercentileLayerNorm(dim, affine=affine, bias=bias, **options)
    elif kind == "layernorm":
        norm = nn.LayerNorm(dim, elementwise_affine=affine,
                            **{k: v for k, v in options.items() if k == "eps"})
    else:
        norm = RMSNorm(dim, affine=affine, **{k: v for k, v in options.items() if k == "eps"})
    return ChannelsLast(norm) if channels_first else norm


def norm_modules(model: nn.Module) -> list[_PercentileNorm]:
    """All Percentile Centering layers inside ``model`` (e.g. to freeze or inspect them)."""
    return [m for m in model.modules() if isinstance(m, _PercentileNorm)]

