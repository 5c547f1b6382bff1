"""Top-K activation sparsity: keep the largest fraction of outputs per example, entry by
entry (:func:`topk_sparsify`) or channel by channel (:func:`channel_topk`).

The k-th largest value of each example is found by selection (linear time) and the output
masked at it, instead of sorting out the top k (``torch.topk``) and scattering them into
zeros. With the opt-in native kernels (:mod:`actlab.activations.native`) one C++ pass per
row selects and masks.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from actlab.activations import native
from actlab.activations.base import functorch_transforms_active
from actlab.activations.shift import feature_dim


def kept_count(fraction: float, n: int) -> int:
    """ceil(fraction · n), at least 1 and at most n.

    The product is rounded to 9 decimals first so that e.g. 0.3 · 10 counts as 3, not 4.
    """
    return max(1, min(n, math.ceil(round(fraction * n, 9))))


def topk_sparsify(y: Tensor, fraction: float) -> Tensor:
    """Keep exactly ``kept_count(fraction, n)`` largest entries per example, zero the rest.

    ``n`` is the size of the feature dimension (:func:`feature_dim`). NaN counts as the
    largest value (as in ``torch.topk``); of entries tied at the k-th largest value only as
    many as make up k are kept, so the count is exact. The gradient flows only through kept
    entries.
    """
    dim = feature_dim(y)
    k = kept_count(fraction, y.shape[dim])
    if k == y.shape[dim]:
        return y
    if functorch_transforms_active():
        return _topk_scatter(y, k, dim)  # data-independent ops only, as torch.func needs
    if dim in (-1, y.dim() - 1) and native.selection_usable(y):
        return _NativeTopK.apply(y, k)[0]
    return torch.where(_dropped_by_threshold(y, k, dim)[0], 0.0, y)


def channel_scores(y: Tensor) -> Tensor:
    """Each channel's rank for structured Top-K: its mean over the H x W positions, (N, C).

    Ours: "Bug or Feature²" §4 says per-channel sparsity "zeros entire feature map channels"
    and that Top-K "retains the k% largest activations", but gives no score for a channel;
    the spatial mean is the value a global average pool reads from it, and it keeps the sign
    (a channel of GELU outputs near their minimum -0.17 ranks last, as its entries would).
    """
    return y.mean(dim=(2, 3))


def channel_topk(y: Tensor, fraction: float, what: str = "channel Top-K") -> Tensor:
    """Structured Top-K of (N, C, H, W) activations: per example keep the
    ``kept_count(fraction, C)`` channels of largest :func:`channel_scores` whole, zero the
    others whole; the gradient flows through the kept channels unchanged.

    Ties go as ``torch.topk`` breaks them (exactly k kept). Other shapes raise ``ValueError``
    naming ``what``: on (N, features) each channel is one entry, so structured and
    per-activation Top-K coincide (use ``topk=K``), and on 3-D input the channel dimension is
    not known ((N, C, L) or (B, T, D)).
    """
    if y.dim() != 4:
        raise ValueError(
            f"{what}: per-channel Top-K needs 4-D (N, C, H, W) activations, channels in dim 1; "
            f"got shape {tuple(y.shape)}. On (N, features) a channel is one entry (per-channel "
            "equals per-activation: use 'topk=K'); on 3-D input the channel dimension is "
            "ambiguous")
    channels = y.shape[1]
    k = kept_count(fraction, channels)
    if k == channels:
        return y
    scores = channel_scores(y.detach())
    index = torch.topk(scores, k, dim=1, sorted=False).indices
    keep = torch.zeros_like(scores, dtype=torch.bool).scatter(1, index, True)
    return torch.where(keep[:, :, None, None], y, 0.0)


def topk_with_threshold(y: Tensor, fraction: float) -> tuple[Tensor, Tensor]:
    """:func:`topk_sparsify` and the mean over rows of each row's k-th largest value (0-dim,
    detached), taken from the same selection: the statistic a running threshold tracks."""
    dim = feature_dim(y)
    n = y.shape[dim]
    k = kept_count(fraction, n)
    if functorch_transforms_active() or y.device.type != "cpu" or k == n:
        values, indices = torch.topk(y, k, dim=dim, sorted=False)
        kth = values.detach().amin(dim=dim)
        out = y if k == n else torch.zeros_like(y).scatter(dim, indices, values)
        return out, kth.mean()
    if dim in (-1, y.dim() - 1) and native.selection_usable(y):
        out, kth = _NativeTopK.apply(y, k)
        return out, kth.mean()
    dropped, kth = _dropped_by_threshold(y, k, dim)
    return torch.where(dropped, 0.0, y), kth.mean()


def _topk_scatter(y: Tensor, k: int, dim: int) -> Tensor:
    """Top-K by ``torch.topk`` and a scatter into zeros (gradient flows to the kept values)."""
    values, indices = torch.topk(y, k, dim=dim, sorted=False)
    return torch.zeros_like(y).scatter_(dim, indices, values)


def _kth_largest(y: Tensor, k: int, dim: int) -> tuple[Tensor, Tensor]:
    """The k-th largest value along ``dim`` (kept dim) and where more than ``k`` entries
    reach it (ties across it, or a NaN threshold).

    On the CPU ``numpy.partition`` selects (introselect; ``torch.kthvalue`` measured 7x and
    ``torch.topk`` 3x slower here); NaN sorts last in both, as the largest value.
    """
    n = y.shape[dim]
    if y.device.type == "cpu" and y.dtype in (torch.float32, torch.float64):
        rows = y.detach().movedim(dim, -1)
        part = np.partition(rows.contiguous().numpy(), n - k, axis=-1)
        kth = part[..., n - k:n - k + 1]
        # entries below the k-th place equal to it: a tie across the threshold
        spill = (part[..., :n - k].max(axis=-1, keepdims=True) == kth) | np.isnan(kth)
        return (torch.from_numpy(kth).movedim(-1, dim),
                torch.from_numpy(spill).movedim(-1, dim))
    kth = y.kthvalue(n - k + 1, dim=dim, keepdim=True).values
    return kth, (y < kth).sum(dim, keepdim=True) < n - k


def _dropped_by_threshold(y: Tensor, k: int, dim: int) -> tuple[Tensor, Tensor]:
    """Mask of the entries Top-K zeroes: those below the k-th largest value of their row;
    and that value per row (kept dim).

    Rows where ties at that value (or NaNs) would keep more than ``k`` entries take their
    mask from ``torch.topk`` instead, so exactly ``k`` are kept. Off the CPU the mask comes
    from ``torch.topk`` directly: checking for ties would read a flag back to the host on
    every call.
    """
    if y.device.type != "cpu":
        values, indices = torch.topk(y, k, dim=dim, sorted=False)
        dropped = torch.ones_like(y, dtype=torch.bool).scatter_(dim, indices, False)
        return dropped, values.detach().amin(dim=dim, keepdim=True)
    threshold, excess = _kth_largest(y, k, dim)
    dropped = y < threshold  # False for NaN, which counts as largest
    if bool(excess.any()):  # ties at the threshold, or a NaN threshold: rare
        exact = torch.ones_like(dropped).scatter_(
            dim, torch.topk(y, k, dim=dim, sorted=False).indices, False)
        dropped = torch.where(excess, exact, dropped)
    return dropped, threshold


class _NativeTopK(torch.autograd.Function):
    """Top-K along the last dim by the C++ selection kernel: the output and each row's
    threshold (not differentiable). The backward recomputes the mask from the input and
    each row's threshold, in the same pass that applies it."""

    @staticmethod
    def forward(ctx, y: Tensor, k: int) -> tuple[Tensor, Tensor]:  # noqa: D102
        y = y.contiguous()
        ctx.kernels = native.selection()
        out, threshold = ctx.kernels.topk_mask(y, k)
        ctx.save_for_backward(y, threshold)
        ctx.mark_non_differentiable(threshold)
        ctx.k = k
        return out, threshold

    @staticmethod
    def backward(ctx, grad: Tensor, _: Tensor | None = None):  # noqa: D102
        y, threshold = ctx.saved_tensors
        return ctx.kernels.topk_mask_backward(grad, y, threshold, ctx.k), None
