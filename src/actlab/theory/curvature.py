"""Activation mean and loss-landscape sharpness ("Rethinking Activation Functions", App. B.1,
Props. B.1–B.2).

Prop. B.1 — a single trainable down-projection ``B`` (``d_out × m``) on fixed activations
``a(x)`` shifted by a scalar ``b``: the Hessian of ``½E‖B(a − b1) − y‖²`` is
``M_b ⊗ I`` with ``M_b = E[(a − b1)(a − b1)ᵀ]`` (column-wise ``vec(B)``; PyTorch's
row-major flattening of ``B`` gives ``I ⊗ M_b``), so the sharpness is ``λ_B(b) = λmax(M_b)``.
``b ↦ λ_B(b)`` is convex; when all neurons share the mean ``μ`` its minimiser is ``b = μ``,
and in general shifting by the average mean ``μ̄`` is within ``‖ε‖²`` of optimal (eq. 28).

Prop. B.2 — jointly training ``A`` and ``B`` of ``f = B(φ(Ax) − b1)`` with squared loss:
the Gauss–Newton sharpness obeys ``max{λ_A, λ_B(b)} ≤ λ_G(b) ≤ λ_A + λ_B(b)`` with
``λ_A = λmax(G_AA)``, ``G_AA = E[(xxᵀ) ⊗ (D_x BᵀB D_x)]`` independent of ``b`` (eq. 33).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from scipy.optimize import minimize_scalar


def _as_samples(activations: torch.Tensor) -> torch.Tensor:
    if activations.ndim != 2:
        raise ValueError(f"activations must be (n_samples, m), got shape {tuple(activations.shape)}")
    return activations


def shifted_second_moment(activations: torch.Tensor, b: float) -> torch.Tensor:
    """``M_b = E[(a − b1)(a − b1)ᵀ]`` from samples ``activations`` of shape ``(n, m)`` (eq. 23)."""
    z = _as_samples(activations) - b
    return z.T @ z / z.shape[0]


def down_projection_hessian(activations: torch.Tensor, b: float, d_out: int) -> torch.Tensor:
    """Hessian of ``½E‖B(a − b1) − y‖²`` w.r.t. ``B`` flattened row-major (PyTorch order): ``I ⊗ M_b``."""
    m_b = shifted_second_moment(activations, b)
    return torch.kron(torch.eye(d_out, dtype=m_b.dtype, device=m_b.device), m_b)


def down_projection_sharpness(activations: torch.Tensor, b: float) -> float:
    """``λ_B(b) = λmax(M_b)`` (Prop. B.1, eq. 24)."""
    return float(torch.linalg.eigvalsh(shifted_second_moment(activations, b).double())[-1])


def optimal_scalar_shift(activations: torch.Tensor) -> float:
    """The scalar ``b`` minimising ``λmax(M_b)`` (convex in ``b``, so the minimum is global).

    Equals the common mean ``μ`` when all neurons share it (Prop. B.1).
    """
    a = _as_samples(activations).double()
    lo, hi = float(a.min()), float(a.max())
    res = minimize_scalar(
        lambda b: down_projection_sharpness(a, b), bounds=(lo, hi), method="bounded",
        options={"xatol": 1e-10 * max(1.0, hi - lo)},
    )
    return float(res.x)


def mean_shift_gap_bound(activations: torch.Tensor) -> float:
    """``‖ε‖²`` of eq. 28, with ``E[a] = μ̄1 + ε``: bound on ``λ_B(μ̄) − min_b λ_B(b)``."""
    mean = _as_samples(activations).double().mean(0)
    eps = mean - mean.mean()
    return float(eps @ eps)


@dataclass
class GaussNewtonBounds:
    """Prop. B.2 ingredients for one shift ``b``: ``lower ≤ λ_G(b) ≤ upper``."""

    lambda_a: float
    lambda_b: float

    @property
    def lower(self) -> float:
        """``max{λ_A, λ_B(b)}``."""
        return max(self.lambda_a, self.lambda_b)

    @property
    def upper(self) -> float:
        """``λ_A + λ_B(b)``."""
        return self.lambda_a + self.lambda_b


def up_projection_gauss_newton(
    x: torch.Tensor, A: torch.Tensor, B: torch.Tensor, activation: Callable[[torch.Tensor], torch.Tensor]
) -> torch.Tensor:
    """Dense ``G_AA = E[J_Aᵀ J_A]`` with ``J_A(x) = B D_x (I ⊗ xᵀ)`` (eq. 33, row-major ``vec(A)``).

    ``x``: ``(n, d_in)`` inputs, ``A``: ``(m, d_in)``, ``B``: ``(d_out, m)``; ``D_x`` is
    ``diag(φ'(Ax))`` from autograd on the elementwise ``activation``.
    """
    pre = (x @ A.T).detach().requires_grad_(True)
    (deriv,) = torch.autograd.grad(activation(pre).sum(), pre)
    # J_A(x)[o, (i, j)] = B[o, i] φ'(pre_i) x_j
    jac = torch.einsum("oi,ni,nj->noij", B, deriv, x).reshape(x.shape[0], B.shape[0], -1)
    return torch.einsum("nop,noq->pq", jac, jac) / x.shape[0]


def gauss_newton_bounds(
    x: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    activation: Callable[[torch.Tensor], torch.Tensor],
    b: float,
) -> GaussNewtonBounds:
    """Prop. B.2 bounds for ``f = B(φ(Ax) − b1)`` with loss ``½E‖f − y‖²`` at shift ``b``."""
    g_aa = up_projection_gauss_newton(x, A, B, activation).double()
    lambda_a = float(torch.linalg.eigvalsh(g_aa)[-1])
    with torch.no_grad():
        acts = activation(x @ A.T)
    return GaussNewtonBounds(lambda_a, down_projection_sharpness(acts, b))
