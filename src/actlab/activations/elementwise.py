"""Closed-form elementwise activations and their analytic derivatives.

Every function here takes a tensor and keyword parameters and works in any floating dtype
(the tests use float64). They are the mathematical reference used by the theory code and by
user-facing ``resolve_elementwise``; the modules built from specs use the fused PyTorch
kernels where PyTorch has one (see ``spec.py``), which these functions must agree with.

Derivative conventions at kinks follow PyTorch: ReLU and ReLU² have slope 0 at 0,
leaky ReLU has ``slope`` at 0, ELU has ``alpha`` at 0 (1 with the default).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

_SQRT_HALF = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_GELU_TANH_K = math.sqrt(2.0 / math.pi)
_GELU_TANH_C = 0.044715

# The constants of torch.nn.SELU (Klambauer et al. 2017).
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def relu(x: Tensor) -> Tensor:
    """max(0, x)."""
    return torch.clamp_min(x, 0.0)


def d_relu(x: Tensor) -> Tensor:
    """Heaviside step, 0 at x = 0 (PyTorch's convention)."""
    return (x > 0).to(x.dtype)


def leaky_relu(x: Tensor, slope: float = 0.01) -> Tensor:
    """x for x > 0, slope * x otherwise."""
    return torch.where(x > 0, x, slope * x)


def d_leaky_relu(x: Tensor, slope: float = 0.01) -> Tensor:
    """1 for x > 0, slope otherwise (slope at 0, as PyTorch)."""
    return torch.where(x > 0, torch.ones_like(x), torch.full_like(x, slope))


def elu(x: Tensor, alpha: float = 1.0) -> Tensor:
    """x for x > 0, alpha * (exp(x) - 1) otherwise."""
    return torch.where(x > 0, x, alpha * torch.expm1(x))


def d_elu(x: Tensor, alpha: float = 1.0) -> Tensor:
    """1 for x > 0, alpha * exp(x) otherwise."""
    return torch.where(x > 0, torch.ones_like(x), alpha * torch.exp(x))


def selu(x: Tensor) -> Tensor:
    """scale * elu(x, alpha) with the self-normalising constants."""
    return SELU_SCALE * elu(x, SELU_ALPHA)


def d_selu(x: Tensor) -> Tensor:
    """Derivative of :func:`selu`."""
    return SELU_SCALE * d_elu(x, SELU_ALPHA)


def _normal_cdf(x: Tensor) -> Tensor:
    return 0.5 * torch.erfc(-x * _SQRT_HALF)


def _normal_pdf(x: Tensor) -> Tensor:
    return _INV_SQRT_2PI * torch.exp(-0.5 * x * x)


def gelu(x: Tensor, tanh: bool = False) -> Tensor:
    """x Φ(x) (exact, erf), or the tanh approximation when ``tanh`` is true."""
    if tanh:
        inner = _GELU_TANH_K * (x + _GELU_TANH_C * x**3)
        return 0.5 * x * (1.0 + torch.tanh(inner))
    return x * _normal_cdf(x)


def d_gelu(x: Tensor, tanh: bool = False) -> Tensor:
    """Φ(x) + x φ(x), or the derivative of the tanh approximation."""
    if tanh:
        inner = _GELU_TANH_K * (x + _GELU_TANH_C * x**3)
        t = torch.tanh(inner)
        d_inner = _GELU_TANH_K * (1.0 + 3.0 * _GELU_TANH_C * x * x)
        return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * d_inner
    return _normal_cdf(x) + x * _normal_pdf(x)


def silu(x: Tensor, beta: float = 1.0) -> Tensor:
    """x σ(βx) (swish; β = 1 is SiLU)."""
    return x * torch.sigmoid(beta * x)


def d_silu(x: Tensor, beta: float = 1.0) -> Tensor:
    """σ(βx) + βx σ(βx)(1 − σ(βx))."""
    s = torch.sigmoid(beta * x)
    return s + beta * x * s * (1.0 - s)


def sigmoid(x: Tensor) -> Tensor:
    """Logistic function 1 / (1 + exp(−x))."""
    return torch.sigmoid(x)


def d_sigmoid(x: Tensor) -> Tensor:
    """σ(x)(1 − σ(x))."""
    s = torch.sigmoid(x)
    return s * (1.0 - s)


def tanh(x: Tensor) -> Tensor:
    """Hyperbolic tangent."""
    return torch.tanh(x)


def d_tanh(x: Tensor) -> Tensor:
    """1 − tanh²(x)."""
    t = torch.tanh(x)
    return 1.0 - t * t


def softplus(x: Tensor, beta: float = 1.0) -> Tensor:
    """log(1 + exp(βx)) / β, exact for all x (no linear shortcut above a threshold)."""
    return torch.logaddexp(beta * x, torch.zeros_like(x)) / beta


def d_softplus(x: Tensor, beta: float = 1.0) -> Tensor:
    """σ(βx)."""
    return torch.sigmoid(beta * x)


def mish(x: Tensor) -> Tensor:
    """x tanh(softplus(x))."""
    return x * torch.tanh(softplus(x))


def d_mish(x: Tensor) -> Tensor:
    """tanh(sp(x)) + x σ(x) (1 − tanh²(sp(x)))."""
    t = torch.tanh(softplus(x))
    return t + x * torch.sigmoid(x) * (1.0 - t * t)


def relu2(x: Tensor) -> Tensor:
    """max(0, x)² (ReLU²)."""
    r = torch.clamp_min(x, 0.0)
    return r * r


def d_relu2(x: Tensor) -> Tensor:
    """2 max(0, x)."""
    return 2.0 * torch.clamp_min(x, 0.0)


def gelu2(x: Tensor, tanh: bool = False) -> Tensor:
    """GELU(x)²."""
    g = gelu(x, tanh)
    return g * g


def d_gelu2(x: Tensor, tanh: bool = False) -> Tensor:
    """2 GELU(x) GELU'(x)."""
    return 2.0 * gelu(x, tanh) * d_gelu(x, tanh)


def identity(x: Tensor) -> Tensor:
    """x (a copy, so callers may modify the result in place)."""
    return x.clone()


def d_identity(x: Tensor) -> Tensor:
    """1."""
    return torch.ones_like(x)


def sugar_surrogate(x: Tensor, alpha: float = 1.67) -> Tensor:
    """The B-SiLU surrogate gradient σ(x) + (x + α) σ(x) (1 − σ(x)) used by SUGAR's backward."""
    s = torch.sigmoid(x)
    return s + (x + alpha) * s * (1.0 - s)
