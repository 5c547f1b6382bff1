"""Bias control after the activation: the adaptive (layer-wise) shift of eq. 9 of
"Rethinking Activation Functions", optionally smoothed by an EMA and frozen after N steps.

The fixed shift ``shift=b`` needs no module: the spec module subtracts ``b`` in place.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from actlab.activations.running import check_freeze_after, check_momentum, resolve_momentum


class _CenterInPlace(torch.autograd.Function):
    """y − mean(y) over ``dim``, written into ``y``; backward g − mean(g)."""

    @staticmethod
    def forward(ctx, y: Tensor, dim: int) -> Tensor:  # type: ignore[override]
        ctx.dim = dim
        ctx.mark_dirty(y)
        return y.sub_(y.mean(dim=dim, keepdim=True))

    @staticmethod
    def backward(ctx, grad_output: Tensor) -> tuple[Tensor, None]:  # type: ignore[override]
        return grad_output - grad_output.mean(dim=ctx.dim, keepdim=True), None


def center(y: Tensor, dim: int, inplace: bool = False) -> Tensor:
    """Subtract the mean over ``dim``; in place (into ``y``) when ``inplace``.

    The centring is a projection, so its backward centres the gradient the same way.
    """
    if inplace:
        return _CenterInPlace.apply(y, dim)
    return y - y.mean(dim=dim, keepdim=True)


def feature_dim(x: Tensor) -> int:
    """The dimension holding the features of one example.

    The last dimension, except for 4-D (N, C, H, W) convolutional activations, where it is
    the channel dimension 1 (so the statistics are taken over channels at each position).
    """
    return 1 if x.dim() == 4 else -1


class AdaptiveCenter(nn.Module):
    """Subtract the mean over the feature dimension (eq. 9) from every feature.

    Without ``momentum`` the per-example mean of the current input is subtracted, so every
    example's output has zero mean over its features, in training and in eval mode.

    With ``momentum`` m a scalar EMA of that mean (averaged over the batch) is kept in the
    buffer ``running_mean``: each training forward call updates
    ``running_mean ← (1 − m) running_mean + m · batch_mean`` (the first call copies the
    batch mean) and subtracts ``running_mean`` as a constant; eval mode subtracts it too.

    With ``freeze_after`` N the running value stops changing after N training forward calls
    (counted in the buffer ``steps``); from then on it is subtracted as a constant in both
    modes. Without ``momentum`` the per-example mean is subtracted while counting, and the
    running value is the EMA with the default momentum ``min(1, 5 / N)`` of
    :mod:`actlab.activations.running` (the meaning and range both options share with every
    running statistic). Buffers are saved in ``state_dict``, so a checkpoint resumes the
    schedule.
    """

    def __init__(self, momentum: float | None = None, freeze_after: int | None = None) -> None:
        super().__init__()
        self.momentum = None if momentum is None else check_momentum(momentum)
        self.freeze_after = None if freeze_after is None else check_freeze_after(freeze_after)
        self.register_buffer("running_mean", torch.zeros(()))
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    @property
    def frozen(self) -> bool:
        """True once ``freeze_after`` training steps have been counted."""
        return self.freeze_after is not None and int(self.steps) >= self.freeze_after

    def _update(self, y: Tensor) -> None:
        batch_mean = y.detach().mean().to(self.running_mean.dtype)
        steps = int(self.steps)
        if steps == 0:
            self.running_mean.copy_(batch_mean)
        else:
            weight = resolve_momentum(self.momentum, self.freeze_after)
            self.running_mean.lerp_(batch_mean, weight)
        self.steps += 1

    def forward(self, y: Tensor, inplace: bool = False) -> Tensor:
        """Centre ``y``; modify it in place when ``inplace`` (the caller owns ``y``)."""
        uses_running = self.momentum is not None or self.frozen
        if self.training and not self.frozen and (
            self.momentum is not None or self.freeze_after is not None
        ):
            self._update(y)
        if uses_running:
            offset = self.running_mean.to(y.dtype)
            return y.sub_(offset) if inplace else y - offset
        return center(y, feature_dim(y), inplace)

    def extra_repr(self) -> str:
        return f"momentum={self.momentum}, freeze_after={self.freeze_after}"
