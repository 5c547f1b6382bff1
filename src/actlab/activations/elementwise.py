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


# ---------------------------------------------------- the other names of torch, timm and HF
# Kink conventions follow PyTorch's backward kernels (hardtanh, hardsigmoid: slope 0 on the
# edges; hardswish: the inner formula on [-3, 3]).


def hardtanh(x: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
    """x clamped to [min_val, max_val]."""
    return torch.clamp(x, min_val, max_val)


def d_hardtanh(x: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
    """1 strictly inside (min_val, max_val), 0 elsewhere."""
    return ((x > min_val) & (x < max_val)).to(x.dtype)


def relu6(x: Tensor) -> Tensor:
    """min(max(0, x), 6)."""
    return hardtanh(x, 0.0, 6.0)


def d_relu6(x: Tensor) -> Tensor:
    """1 on (0, 6), 0 elsewhere."""
    return d_hardtanh(x, 0.0, 6.0)


def hardsigmoid(x: Tensor) -> Tensor:
    """relu6(x + 3) / 6."""
    return torch.clamp(x + 3.0, 0.0, 6.0) / 6.0


def d_hardsigmoid(x: Tensor) -> Tensor:
    """1/6 on (-3, 3), 0 elsewhere."""
    return ((x > -3.0) & (x < 3.0)).to(x.dtype) / 6.0


def hardswish(x: Tensor) -> Tensor:
    """x relu6(x + 3) / 6."""
    return x * hardsigmoid(x)


def d_hardswish(x: Tensor) -> Tensor:
    """0 below -3, x/3 + 1/2 on [-3, 3], 1 above."""
    inner = x / 3.0 + 0.5
    return torch.where(x < -3.0, torch.zeros_like(x), torch.where(x <= 3.0, inner,
                                                                  torch.ones_like(x)))


def hard_mish(x: Tensor) -> Tensor:
    """timm's hard Mish: x clamp(x + 2, 0, 2) / 2."""
    return 0.5 * x * torch.clamp(x + 2.0, 0.0, 2.0)


def d_hard_mish(x: Tensor) -> Tensor:
    """0 below -2, x + 1 on [-2, 0], 1 above."""
    return torch.where(x < -2.0, torch.zeros_like(x), torch.where(x <= 0.0, x + 1.0,
                                                                  torch.ones_like(x)))


def softsign(x: Tensor) -> Tensor:
    """x / (1 + |x|)."""
    return x / (1.0 + x.abs())


def d_softsign(x: Tensor) -> Tensor:
    """1 / (1 + |x|)²."""
    return 1.0 / (1.0 + x.abs()) ** 2


def logsigmoid(x: Tensor) -> Tensor:
    """log σ(x) = −softplus(−x), exact for all x."""
    return -softplus(-x)


def d_logsigmoid(x: Tensor) -> Tensor:
    """σ(−x)."""
    return torch.sigmoid(-x)


def tanhshrink(x: Tensor) -> Tensor:
    """x − tanh(x)."""
    return x - torch.tanh(x)


def d_tanhshrink(x: Tensor) -> Tensor:
    """tanh²(x)."""
    t = torch.tanh(x)
    return t * t


def celu(x: Tensor, alpha: float = 1.0) -> Tensor:
    """x for x > 0, alpha (exp(x / alpha) − 1) otherwise."""
    return torch.where(x > 0, x, alpha * torch.expm1(x / alpha))


def d_celu(x: Tensor, alpha: float = 1.0) -> Tensor:
    """1 for x > 0, exp(x / alpha) otherwise."""
    return torch.where(x > 0, torch.ones_like(x), torch.exp(x / alpha))


def laplace(x: Tensor, mu: float = 0.707107, sigma: float = 0.282095) -> Tensor:
    """The normal CDF of (x − mu) / sigma, Hugging Face's ``laplace`` (MEGA's attention
    activation); its defaults are that implementation's."""
    return 0.5 * (1.0 + torch.erf((x - mu) / (sigma * math.sqrt(2.0))))


def d_laplace(x: Tensor, mu: float = 0.707107, sigma: float = 0.282095) -> Tensor:
    """The normal density of (x − mu) / sigma, divided by sigma."""
    return _normal_pdf((x - mu) / sigma) / sigma


def sqrtsoftplus(x: Tensor) -> Tensor:
    """sqrt(softplus(x)) (Hugging Face's ``sqrtsoftplus``)."""
    return torch.sqrt(softplus(x))


def d_sqrtsoftplus(x: Tensor) -> Tensor:
    """σ(x) / (2 sqrt(softplus(x)))."""
    return torch.sigmoid(x) / (2.0 * torch.sqrt(softplus(x)))


def xielu(x: Tensor, alpha_p: float = 0.8, alpha_n: float = 0.8, beta: float = 0.5,
          eps: float = -1e-6) -> Tensor:
    """xIELU as Hugging Face computes it: alpha_p x² + beta x for x > 0, else
    alpha_n (expm1(min(x, eps)) − x) + beta x."""
    negative = (torch.expm1(torch.clamp_max(x, eps)) - x) * alpha_n + beta * x
    return torch.where(x > 0, alpha_p * x * x + beta * x, negative)


def d_xielu(x: Tensor, alpha_p: float = 0.8, alpha_n: float = 0.8, beta: float = 0.5,
            eps: float = -1e-6) -> Tensor:
    """2 alpha_p x + beta for x > 0; alpha_n (exp(x) − 1) + beta for x <= eps; beta − alpha_n
    on (eps, 0] (where min(x, eps) is constant)."""
    negative = torch.where(x <= eps, alpha_n * torch.expm1(x), torch.full_like(x, -alpha_n))
    return torch.where(x > 0, 2.0 * alpha_p * x + beta, negative + beta)
