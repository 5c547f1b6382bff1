"""Normalization layers: RMSNorm and Percentile Centering with Accumulation Stop.

Percentile Centering (PC) shifts features by their ``q``-th percentile instead of their
mean, ``x_hat = (x - Q_x(q)) / sqrt(var_x + eps)``, so that a following ReLU zeroes a
fraction ``q`` of its inputs. The percentile is found by selection rather than a full
sort, with the gradient of ``torch.quantile`` (:mod:`actlab.nn.percentile`, where the
selection and the autograd functions live).

Both flavours keep an exponential moving average of their statistics, like BatchNorm's
running statistics. With ``freeze_after=T`` they apply *Accumulation Stop*: after ``T``
training steps the running statistics are frozen and used from then on, and no batch
statistics are computed any more (the layer becomes a fixed affine map).

:func:`make_norm` builds any supported normalization from a short name (the spec's grammar:
:mod:`actlab.nn.norm_spec`).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from actlab.activations.running import check_freeze_after, resolve_momentum
from actlab.nn.norm_spec import NORM_NAMES, parse_norm
from actlab.nn.percentile import (
    _FROZEN_ROWS_MIN_NUMEL,
    _frozen_affine,
    _FrozenRows,
    _PercentileCenterScale,
    percentile,
)

# percentile, parse_norm and NORM_NAMES are importable from here, as before their files
__all__ = ["DEFAULT_MOMENTUM", "NORM_NAMES", "ChannelsLast", "FlattenBatch",
           "PercentileBatchNorm", "PercentileLayerNorm", "RMSNorm", "make_norm", "norm_modules",
           "parse_norm", "percentile"]

DEFAULT_MOMENTUM = 0.1  # BatchNorm's, when no freeze_after sets one


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


def _float_under_autocast(x: Tensor) -> Tensor:
    """``x`` in float32 when autocast runs its device in a lower precision: the percentile
    norms compute in float32 there, as autocast runs PyTorch's LayerNorm and BatchNorm (their
    backward would otherwise meet bfloat16 inputs and float32 weights)."""
    if (x.dtype in (torch.bfloat16, torch.float16) and x.device.type in ("cpu", "cuda")
            and torch.is_autocast_enabled(x.device.type)):
        return x.float()
    return x


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
        x = _float_under_autocast(x)
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
        x = _float_under_autocast(x)
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


def is_norm(module: nn.Module) -> bool:
    """Whether ``module`` is a normalisation layer: its class name says so (``LayerNorm``,
    ``BatchNorm2d``, ``RMSNorm``, ``GroupNorm`` and ours alike)."""
    return "norm" in type(module).__name__.lower()
