"""Angle between unshifted and shifted gradients early in training ("Rethinking Activation
Functions", App. B.2, eqs. 50–62).

Setting: only a down-projection ``B`` is trained with gradient descent (learning rate
``η``) on ``½E‖B a(x) − B⋆ a(x)‖²``, with ``E[a] = μ1`` and ``Cov(a) = qI`` in ``m``
dimensions; the shifted model uses ``a − μ1``. With ``e = 1/√m`` the second moments are
``M₀ = qI + mμ²eeᵀ`` and ``M_μ = qI`` (eq. 54), so ``M₀`` is ``κ = (q + mμ²)/q`` times
steeper along ``e``. Starting both from the same ``B_init`` with
``‖Δ∥‖² = ‖Δ‖²/m`` (eq. 60), the angle ``ψ_k`` between the ``k``-th gradients obeys

    cos ψ_k = (m − 1 + t_k) / √(m (m − 1 + t_k²)),   t_k = κ ((1 − ηκq)/(1 − ηq))^(k−1).

At ``k = 1`` the angle does not depend on ``η``.
"""

from __future__ import annotations

import math

# Pre-activation variance of the controlled model at initialisation (App. A, eq. 13:
# Z ~ N(0, 1/3) from U[-1/√d, 1/√d] weights after LayerNorm).
PREACTIVATION_VARIANCE = 1.0 / 3.0


def degrees_from_cosine(cos: float) -> float:
    """The angle in degrees whose cosine is ``cos``, clamped to [-1, 1] against rounding."""
    return math.degrees(math.acos(max(-1.0, min(1.0, cos))))


def relu_moments(variance: float = PREACTIVATION_VARIANCE) -> tuple[float, float]:
    """``(μ, q)`` of ReLU(Z), Z ~ N(0, variance) (eq. 62): ``μ = √(v/2π)``, ``q = v/2 − μ²``.

    With the default ``v = 1/3`` this is ``μ = 1/√(6π) ≈ 0.230`` and ``q = (π−1)/(6π)``.
    """
    if not variance > 0:
        raise ValueError(f"variance must be > 0, got {variance}")
    mu = math.sqrt(variance / (2.0 * math.pi))
    return mu, variance / 2.0 - mu * mu


def steepness_ratio(m: int, q: float, mu: float) -> float:
    """``κ = (q + mμ²)/q``: how much steeper the unshifted loss is along ``e = 1/√m``."""
    if not q > 0:
        raise ValueError(f"q must be > 0, got {q}")
    return (q + m * mu * mu) / q


def gradient_ratio(k: int, m: int, eta: float, q: float, mu: float) -> float:
    """``t_k`` of eq. 59: relative weight of the ``e`` direction in the ``k``-th unshifted gradient."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    kappa = steepness_ratio(m, q, mu)
    return kappa * ((1.0 - eta * kappa * q) / (1.0 - eta * q)) ** (k - 1)


def gradient_angle(k: int, m: int, eta: float, q: float, mu: float) -> float:
    """Angle ψ_k in degrees between the unshifted and shifted gradients at update ``k`` (eq. 61).

    ``m`` is the hidden width (``m >= 1``), ``eta`` the gradient-descent learning rate and
    ``(μ, q)`` the activation mean and variance (e.g. :func:`relu_moments`).
    """
    if m < 1:
        raise ValueError(f"m must be >= 1, got {m}")
    if eta < 0:
        raise ValueError(f"eta must be >= 0, got {eta}")
    t = gradient_ratio(k, m, eta, q, mu)
    return degrees_from_cosine((m - 1 + t) / math.sqrt(m * (m - 1 + t * t)))
