"""Top-K by a threshold instead of a selection: a running (then frozen) threshold, and the
Gaussian threshold of each row's mean and standard deviation.

``topk=K:freeze_after=N`` ("Bug or Feature²" §1, "An efficiency bonus": "Top-K thresholds
can all be computed as running means exclusively over these early steps"): during the
warm-up of N training forward calls, exact Top-K is applied and its threshold, the k-th
largest value of each row, is averaged over the rows of the batch into one EMA per layer
(:class:`TopKThreshold`); afterwards the layer keeps ``y > threshold`` by comparison only.
Why one threshold per layer and not per channel: Top-K selects within one example across
its features against one cut, the row's k-th value, so the statistic it computes is one
number per example, and its running mean over examples and steps is one number per layer.
A per-channel cut would make each unit active a fraction K of the time whatever the other
units do, which is a different mechanism (the per-channel shift of Percentile Centering,
computed "channel-wise and averaged over the batch", App. D.1), and would need a selection
per channel during warm-up that exact Top-K does not do.

``topk=K:gaussian`` keeps ``y > mu + sigma * Phi^-1(1 - K)`` per row, mu and sigma the row's
mean and (biased) standard deviation of the activation's output: exactly a fraction K when
the row is Gaussian, no selection and no warm-up. ``topk=K:gaussian_shift`` is the form of
Gemma 3n (transformers' ``Gemma3nTextMLP._gaussian_topk``): ``relu(x - (mu + sigma *
Phi^-1(1 - K)))`` of the pre-activation row x, before the function, so kept entries are
also shifted down by the cutoff; the gradient flows through mu and sigma as there.
"""

from __future__ import annotations

from statistics import NormalDist

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from actlab.activations import native
from actlab.activations.base import functorch_transforms_active
from actlab.activations.fused import FusedKernel
from actlab.activations.running import check_freeze_after, check_momentum, resolve_momentum
from actlab.activations.shift import feature_dim
from actlab.activations.sparse import topk_sparsify, topk_with_threshold


def gaussian_multiplier(fraction: float) -> float:
    """``Phi^-1(1 - fraction)``: the number of standard deviations above the mean that a
    Gaussian exceeds with probability ``fraction`` (``-inf`` for a fraction of 1)."""
    if fraction >= 1.0:
        return float("-inf")
    return NormalDist().inv_cdf(1.0 - fraction)


def row_moments(v: Tensor, dim: int) -> tuple[Tensor, Tensor]:
    """Mean and biased standard deviation over ``dim`` (kept), differentiable.

    The variance is E[v^2] - E[v]^2 from two vectorised reductions: ``torch.std_mean``
    (Welford) measured 25 ms on (4096, 1024) float32 on one thread here, these two 2.5 ms.
    The difference loses digits only when the mean is large against the spread (|mean| /
    std ~ 1e3 in float32), which activation rows are not.
    """
    n = v.shape[dim]
    mean = v.mean(dim=dim, keepdim=True)
    square = torch.linalg.vector_norm(v, dim=dim, keepdim=True).square() / n
    return mean, (square - mean.square()).clamp_min(0.0).sqrt()


def gaussian_cutoff(v: Tensor, fraction: float, dim: int) -> Tensor:
    """Per row (kept ``dim``): mean + std * Phi^-1(1 - fraction), std biased as in Gemma 3n."""
    mean, std = row_moments(v, dim)
    return mean + std * gaussian_multiplier(fraction)


def gaussian_mask(y: Tensor, fraction: float) -> Tensor:
    """Keep ``y > cutoff`` of its row (:func:`gaussian_cutoff`), zero the rest; the gradient
    flows through kept entries only (the mask is piecewise constant in the cutoff)."""
    if fraction >= 1.0:
        return y
    cutoff = gaussian_cutoff(y.detach(), fraction, feature_dim(y))
    return torch.where(y > cutoff, y, 0.0)


def gaussian_shift(x: Tensor, fraction: float) -> Tensor:
    """Gemma 3n's ``relu(x - cutoff)`` of the pre-activation rows, differentiable in the cutoff."""
    if fraction >= 1.0:
        return x
    return F.relu(x - gaussian_cutoff(x, fraction, feature_dim(x)))


class _FusedMask(torch.autograd.Function):
    """``f(x)`` with entries at or below ``cutoff`` zeroed, in one autograd node.

    Forward computes f(x) into a fresh tensor and masks it; backward masks the incoming
    gradient into one fresh tensor and applies f's backward kernel in place on it. ``cutoff``
    is a 0-dim tensor (the frozen threshold) or ``None`` for the per-row Gaussian cutoff of
    f(x) itself with multiplier ``z``. Where every cutoff is >= 0 (read on the CPU only) the
    kept entries are exactly the positive outputs, so the mask is ``threshold_`` in place
    (one pass; ATen's boolean compare and select measured 3 and 7 ms on (4096, 1024), a
    GELU 4.5 ms) and the backward ``threshold_backward(grad, out, 0)``; otherwise a boolean
    mask is kept for the backward. With the opt-in native kernels (:mod:`.native`) the
    Gaussian cutoff's forward and backward are one pass each (rows in cache).
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx, x: Tensor, kernel: FusedKernel, cutoff: Tensor | None, z: float
    ) -> Tensor:
        ctx.kernel = kernel
        # Native kernels for the Gaussian cutoff only: for the frozen threshold a one-pass
        # kernel measured slower than ATen's GELU plus threshold_ (forward+backward 1.67x
        # against 1.39x a plain GELU's; the native GELU is slower than ATen's here).
        ctx.native = (
            cutoff is None
            and native.usable(x, kernel.native_kind)
            and feature_dim(x) in (-1, x.dim() - 1)
        )
        if ctx.native:  # one pass forward, the cutoff computed row by row in cache
            y, cutoff = native.gaussian_forward(x, kernel.native_kind, kernel.native_param, z)
            ctx.save_for_backward(x, y, cutoff)
            return y
        y = kernel.forward(x)
        if cutoff is None:
            mean, std = row_moments(y, feature_dim(y))
            cutoff = mean + std * z
        cutoff = cutoff.to(y.dtype)
        ctx.by_sign = cutoff.device.type == "cpu" and bool((cutoff >= 0).all())
        if ctx.by_sign:
            if cutoff.dim() == 0:
                F.threshold_(y, float(cutoff), 0.0)  # y if y > cutoff else 0
            else:
                y = torch.where(y > cutoff, y, 0.0)
            ctx.save_for_backward(x, y)
            return y
        kept = y > cutoff
        ctx.save_for_backward(x, kept)
        return torch.where(kept, y, 0.0)

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        if ctx.native:
            x, out, cutoff = ctx.saved_tensors
            if not torch.is_grad_enabled():
                kernel = ctx.kernel
                return (
                    native.mask_backward(
                        grad, x, out, kernel.native_kind, kernel.native_param, cutoff
                    ),
                    None,
                    None,
                    None,
                )
            rows = cutoff if cutoff.dim() == 0 else cutoff.reshape(*x.shape[:-1], 1)
            kept = ctx.kernel.forward(x.detach()) > rows
            return ctx.kernel.backward_for_graph(torch.where(kept, grad, 0.0), x), None, None, None
        x, saved = ctx.saved_tensors
        if ctx.by_sign:  # saved is the output: kept entries are > cutoff >= 0
            masked = torch.ops.aten.threshold_backward(grad, saved, 0)
        else:  # saved is the mask of kept entries
            masked = torch.where(saved, grad, 0.0)
        if torch.is_grad_enabled():  # double backward: out of place, differentiable
            return ctx.kernel.backward_for_graph(masked, x), None, None, None
        return ctx.kernel.backward_into(masked, x), None, None, None


def fused_frozen_mask(x: Tensor, kernel: FusedKernel, threshold: Tensor) -> Tensor:
    """``f(x)`` kept where above the 0-dim ``threshold``, zero elsewhere (one node)."""
    return _FusedMask.apply(x, kernel, threshold, 0.0)


def fused_gaussian_mask(x: Tensor, kernel: FusedKernel, fraction: float) -> Tensor:
    """``f(x)`` kept where above its row's Gaussian cutoff, zero elsewhere (one node)."""
    return _FusedMask.apply(x, kernel, None, gaussian_multiplier(fraction))


class TopKThreshold(nn.Module):
    """Top-K whose threshold is a running statistic, frozen after ``freeze_after`` steps.

    In training, until frozen, it applies exact Top-K (:func:`topk_sparsify`) and updates
    the 0-dim buffer ``threshold`` with the batch mean of the rows' k-th largest values:
    the first call copies it, later ones take an EMA with ``momentum`` (default
    ``min(1, 5 / freeze_after)``, :mod:`actlab.activations.running`). After ``freeze_after``
    training calls (buffer ``steps``), and in eval mode once a threshold was measured, it
    keeps ``y > threshold`` and zeroes the rest, by comparison only. Eval mode never
    updates; before any update it applies exact Top-K. Under ``torch.func`` transforms the
    warm-up applies exact Top-K without updating (buffers cannot be written there); the
    comparison path is transformable (``vmap`` over stacked states included).

    Whether the threshold is in use is decided on the host from ``steps`` (read on
    construction and when a ``state_dict`` is loaded, counted on the host since), so no
    step reads a device value back.
    """

    threshold: Tensor
    steps: Tensor

    def __init__(
        self, fraction: float, momentum: float | None = None, freeze_after: int | None = None
    ) -> None:
        super().__init__()
        if momentum is None and freeze_after is None:
            raise ValueError("a running Top-K threshold needs momentum or freeze_after")
        self.fraction = float(fraction)
        self.momentum = None if momentum is None else check_momentum(momentum)
        self.freeze_after = None if freeze_after is None else check_freeze_after(freeze_after)
        self.register_buffer("threshold", torch.zeros(()))
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))
        self._count = 0

    @property
    def frozen(self) -> bool:
        """True once ``freeze_after`` training steps have updated the threshold."""
        return self.freeze_after is not None and self._count >= self.freeze_after

    def uses_threshold(self) -> bool:
        """Whether this call masks by the running threshold (frozen, or eval after updates)."""
        return self.frozen or (not self.training and self._count > 0)

    def _update(self, kth_mean: Tensor) -> None:
        value = kth_mean.to(self.threshold.dtype)
        if self._count == 0:
            self.threshold.copy_(value)
        else:
            self.threshold.lerp_(value, float(resolve_momentum(self.momentum, self.freeze_after)))
        self.steps += 1
        self._count += 1

    def forward(self, y: Tensor) -> Tensor:
        """Top-K of ``y`` along its feature dimension, by selection or by the threshold."""
        if self.uses_threshold():
            return torch.where(y > self.threshold.to(y.dtype), y, 0.0)
        if not self.training or functorch_transforms_active():
            return topk_sparsify(y, self.fraction)
        out, kth_mean = topk_with_threshold(y, self.fraction)
        with torch.no_grad():
            self._update(kth_mean)
        return out

    def _load_from_state_dict(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
        """Load as usual, then re-read the host-side step count from ``steps``."""
        super()._load_from_state_dict(*args, **kwargs)
        self.refresh_from_buffers()

    def refresh_from_buffers(self) -> None:
        """Re-read the host-side step count after ``steps`` was written in place."""
        if not self.steps.is_meta:
            self._count = int(self.steps)

    def extra_repr(self) -> str:
        return (
            f"fraction={self.fraction}, momentum={self.momentum}, freeze_after={self.freeze_after}"
        )
