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
:class:`OneBlockCurvature` builds the whole dense ``G_b`` for any ``b`` from pieces computed
once, and the Hessian ``H_b = G_b + E[Σ_o r_o ∇²f_o]`` with ``R_b = E[‖r‖‖x‖]`` (eqs. 42–46:
with fixed ReLU gates ``|λmax(H_b) − λmax(G_b)| ≤ ‖H_b − G_b‖₂ ≤ R_b``).

Eq. 49 — several down-projections on fixed activations ``f = Σ_ℓ B_ℓ(a_ℓ − b_ℓ1)``: the
Hessian is ``E[zzᵀ] ⊗ I`` with ``z`` the stacked shifted activations
(:func:`joint_second_moment`, :func:`joint_down_projection_hessian`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from scipy.optimize import minimize_scalar


def _as_samples(activations: torch.Tensor) -> torch.Tensor:
    if activations.ndim != 2:
        raise ValueError(
            f"activations must be (n_samples, m), got shape {tuple(activations.shape)}"
        )
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
        lambda b: down_projection_sharpness(a, b),
        bounds=(lo, hi),
        method="bounded",
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
    x: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    activation: Callable[[torch.Tensor], torch.Tensor],
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


# ---------------------------------------------------------------- App. B.1.2-B.1.3, dense
def _derivatives(
    pre: torch.Tensor, activation: Callable[[torch.Tensor], torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``φ(pre)``, ``φ'(pre)`` and ``φ''(pre)`` of an elementwise ``activation`` by autograd.

    ReLU's second derivative is zero wherever it is defined (autograd gives zeros), which is
    the fixed-gate region of eq. 43.
    """
    with torch.enable_grad():
        z = pre.detach().requires_grad_(True)
        out = activation(z)
        (d1,) = torch.autograd.grad(out.sum(), z, create_graph=True)
        d2 = torch.autograd.grad(d1.sum(), z, allow_unused=True)[0] if d1.requires_grad else None
    return out.detach(), d1.detach(), torch.zeros_like(z) if d2 is None else d2.detach()


class OneBlockCurvature:
    """Dense Gauss–Newton and Hessian of ``½E‖B(φ(Ax) − b1) − y‖²`` w.r.t. ``(A, B)`` at one
    state, for any scalar shift ``b`` (eqs. 29–36 and 42–45).

    ``x``: ``(n, d_in)`` inputs (the expectation is their average), ``A``: ``(m, d_in)``,
    ``B``: ``(d_out, m)``, ``activation`` elementwise. Parameters are ordered as a module
    with ``A`` then ``B`` flattens them (row-major ``vec(A)``, then ``vec(B)``); eigenvalues
    do not depend on that order. Everything that does not depend on ``b`` is computed once,
    so a sweep over ``b`` costs one ``P × P`` assembly and eigen-solve per shift (``P = m
    d_in + d_out m``). The blocks, with ``W_x = vec(D_x ⊗ xᵀ)`` and ``z_b = φ(Ax) − b1``:

    * ``G_AA[(i,j),(i',j')] = (BᵀB)_{ii'} E[φ'_i φ'_{i'} x_j x_{j'}]`` (eq. 33, no ``b``);
    * ``G_AB[(i,j),(o,k)] = B_{oi} E[φ'_i x_j z_{b,k}]`` (eq. 34);
    * ``G_BB = I ⊗ M_b`` (eq. 35, PyTorch order of Prop. B.1's ``M_b ⊗ I``).
    """

    def __init__(
        self,
        x: torch.Tensor,
        A: torch.Tensor,
        B: torch.Tensor,
        activation: Callable[[torch.Tensor], torch.Tensor],
    ) -> None:
        if (
            x.ndim != 2
            or A.ndim != 2
            or B.ndim != 2
            or A.shape[1] != x.shape[1]
            or B.shape[1] != A.shape[0]
        ):
            raise ValueError(
                f"shapes must be x (n, d_in), A (m, d_in), B (d_out, m); got "
                f"{tuple(x.shape)}, {tuple(A.shape)}, {tuple(B.shape)}"
            )
        self.x, self.A, self.B = x.detach(), A.detach(), B.detach()
        self.activation = activation
        n, d_in = x.shape
        m, d_out = A.shape[0], B.shape[0]
        self.n, self.d_in, self.m, self.d_out = n, d_in, m, d_out
        self.acts, self.d1, self.d2 = _derivatives(self.x @ self.A.T, activation)
        w = (self.d1[:, :, None] * self.x[:, None, :]).reshape(n, m * d_in)  # rows W_x
        gram = self.B.T @ self.B
        self.g_aa = (w.T @ w / n) * gram.repeat_interleave(d_in, 0).repeat_interleave(d_in, 1)
        self._w_acts = (w.T @ self.acts / n).reshape(m, d_in, m)  # E[W_x aᵀ]
        self._w_mean = w.mean(0).reshape(m, d_in)  # E[W_x]
        self._second = self.acts.T @ self.acts / n  # E[aaᵀ]
        self._mean = self.acts.mean(0)
        self.lambda_a = float(torch.linalg.eigvalsh(self.g_aa)[-1])

    @property
    def dim(self) -> int:
        """Number of parameters ``P``."""
        return self.m * self.d_in + self.d_out * self.m

    @property
    def mean_activation(self) -> float:
        """``μ̄ = E_{x,i}[a_i(x)]``, the average activation mean (App. B.1.2)."""
        return float(self._mean.mean())

    def second_moment(self, b: float) -> torch.Tensor:
        """``M_b = E[(a − b1)(a − b1)ᵀ]`` (eq. 23)."""
        ones = torch.ones_like(self._mean)
        return (
            self._second
            - b * (torch.outer(self._mean, ones) + torch.outer(ones, self._mean))
            + b * b * torch.outer(ones, ones)
        )

    def lambda_b(self, b: float) -> float:
        """``λ_B(b) = λmax(M_b)`` (Prop. B.1)."""
        return float(torch.linalg.eigvalsh(self.second_moment(b))[-1])

    def gauss_newton(self, b: float) -> torch.Tensor:
        """The dense ``P × P`` matrix ``G_b = E[JᵀJ]`` (eq. 32)."""
        m, d_in, d_out = self.m, self.d_in, self.d_out
        cross = self._w_acts - b * self._w_mean[:, :, None]  # E[W_x z_bᵀ], (m, d_in, m)
        g_ab = torch.einsum("oi,ijk->ijok", self.B, cross).reshape(m * d_in, d_out * m)
        eye = torch.eye(d_out, dtype=self.B.dtype, device=self.B.device)
        g_bb = torch.kron(eye, self.second_moment(b))
        return torch.cat([torch.cat([self.g_aa, g_ab], 1), torch.cat([g_ab.T, g_bb], 1)], 0)

    def lambda_g(self, b: float) -> float:
        """``λ_G(b) = λmax(G_b)`` (eq. 36)."""
        return float(torch.linalg.eigvalsh(self.gauss_newton(b))[-1])

    def bounds(self, b: float) -> GaussNewtonBounds:
        """Eq. 37's ingredients ``λ_A`` and ``λ_B(b)``."""
        return GaussNewtonBounds(self.lambda_a, self.lambda_b(b))

    def residuals(self, b: float, y: torch.Tensor) -> torch.Tensor:
        """``r(x) = B(φ(Ax) − b1) − y(x)``, ``(n, d_out)``."""
        return (self.acts - b) @ self.B.T - y

    def residual_term(self, b: float, y: torch.Tensor) -> torch.Tensor:
        """``H_b − G_b = E[Σ_o r_o ∇²f_o]``, dense (the second term of eq. 42).

        Its ``A``–``B`` block is ``δ_{ik} E[r_o φ'_i x_j]`` (the ``2ΔB D_x ΔA x`` of eq. 44);
        its ``A``–``A`` block ``δ_{ii'} E[(Bᵀr)_i φ''_i x_j x_{j'}]`` vanishes for ReLU
        (``H_AA = G_AA``) and ``H_BB = G_BB`` always.
        """
        m, d_in, d_out = self.m, self.d_in, self.d_out
        r = self.residuals(b, y)
        eye = torch.eye(m, dtype=self.B.dtype, device=self.B.device)
        r_ab = torch.einsum("no,ni,nj->oij", r, self.d1, self.x) / self.n
        c_ab = torch.einsum("oij,ik->ijok", r_ab, eye).reshape(m * d_in, d_out * m)
        weight = (r @ self.B) * self.d2  # (Bᵀr)_i φ''_i per sample
        q = torch.einsum("ni,nj,nl->ijl", weight, self.x, self.x) / self.n
        c_aa = torch.einsum("ijl,ik->ijkl", q, eye).reshape(m * d_in, m * d_in)
        zeros = torch.zeros(d_out * m, d_out * m, dtype=self.B.dtype, device=self.B.device)
        return torch.cat([torch.cat([c_aa, c_ab], 1), torch.cat([c_ab.T, zeros], 1)], 0)

    def hessian(self, b: float, y: torch.Tensor) -> torch.Tensor:
        """The dense Hessian ``H_b = G_b + E[Σ_o r_o ∇²f_o]`` (eq. 42)."""
        return self.gauss_newton(b) + self.residual_term(b, y)

    def residual_bound(self, b: float, y: torch.Tensor) -> float:
        """``R_b = E[‖r(x)‖ ‖x‖]`` (eq. 45): with fixed ReLU gates ``‖H_b − G_b‖₂ ≤ R_b`` (eq. 46)."""
        return float((self.residuals(b, y).norm(dim=1) * self.x.norm(dim=1)).mean())

    def loss(self, b: float, y: torch.Tensor) -> float:
        """``½E‖f(x) − y(x)‖²`` at shift ``b``."""
        return float(0.5 * self.residuals(b, y).pow(2).sum(1).mean())


def minimise_convex(
    fn: Callable[[float], float], grid: list[float], refine: int = 10
) -> tuple[float, float, list[float]]:
    """Minimum of a convex ``fn`` of one variable: its values on ``grid`` (sorted), then
    ``refine`` golden-section steps inside the two grid cells around the grid minimum.

    ``b ↦ λ_G(b)`` is convex (``vᵀG_b v = E‖J_b v‖²`` is a convex quadratic in ``b`` for every
    ``v``, and a maximum of convex functions is convex), so the bracket holds the minimum
    unless the grid minimum is at an end. Returns ``(argmin, min, values on grid)``.
    """
    values = [fn(b) for b in grid]
    k = min(range(len(grid)), key=values.__getitem__)
    lo, hi = grid[max(k - 1, 0)], grid[min(k + 1, len(grid) - 1)]
    best_b, best = grid[k], values[k]
    ratio = (5**0.5 - 1) / 2
    c, d = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
    fc, fd = fn(c), fn(d)
    for _ in range(refine):
        for b, v in ((c, fc), (d, fd)):
            if v < best:
                best_b, best = b, v
        if fc <= fd:
            hi, d, fd = d, c, fc
            c = hi - ratio * (hi - lo)
            fc = fn(c)
        else:
            lo, c, fc = c, d, fd
            d = lo + ratio * (hi - lo)
            fd = fn(d)
    for b, v in ((c, fc), (d, fd)):
        if v < best:
            best_b, best = b, v
    return best_b, best, values


# ---------------------------------------------------------------- App. B.1.4, eqs. 47-49
def joint_second_moment(activations: list[torch.Tensor], shifts: list[float]) -> torch.Tensor:
    """``E[zzᵀ]`` of the stacked ``z = (a_1 − b_1 1, …, a_L − b_L 1)`` (eq. 49's matrix).

    Equals ``Σ_stack + v_b v_bᵀ`` when every layer's neurons share the mean ``μ_ℓ``; in
    general ``v_b`` is the stacked ``E[a_ℓ] − b_ℓ 1``.
    """
    if len(activations) != len(shifts) or not activations:
        raise ValueError(
            f"need one shift per layer, got {len(activations)} layers and {len(shifts)} shifts"
        )
    z = torch.cat([_as_samples(a) - b for a, b in zip(activations, shifts)], dim=1)
    return z.T @ z / z.shape[0]


def stacked_covariance(activations: list[torch.Tensor]) -> torch.Tensor:
    """``Σ_stack = Cov((a_1, …, a_L))`` (eq. 48), normalised by ``n``."""
    a = torch.cat([_as_samples(t) for t in activations], dim=1)
    centred = a - a.mean(0)
    return centred.T @ centred / a.shape[0]


def joint_down_projection_hessian(
    activations: list[torch.Tensor], shifts: list[float], d_out: int
) -> torch.Tensor:
    """Hessian of ``½E‖Σ_ℓ B_ℓ(a_ℓ − b_ℓ1) − y‖²`` w.r.t. ``(B_1, …, B_L)``, each flattened
    row-major in turn (a module's order): eq. 49's ``M ⊗ I`` with its rows permuted."""
    moment = joint_second_moment(activations, shifts)
    widths = [a.shape[1] for a in activations]
    starts = [sum(widths[:i]) for i in range(len(widths))]
    # position of parameter (ℓ, o, k) in the (o, stacked k) order of kron(I, M)
    total = sum(widths)
    order = [
        o * total + s + k for s, w in zip(starts, widths) for o in range(d_out) for k in range(w)
    ]
    index = torch.tensor(order, device=moment.device)
    eye = torch.eye(d_out, dtype=moment.dtype, device=moment.device)
    return torch.kron(eye, moment)[index][:, index]


def joint_down_projection_sharpness(activations: list[torch.Tensor], shifts: list[float]) -> float:
    """``λmax(H_joint(b)) = λmax(E[zzᵀ])`` (eq. 49)."""
    return float(torch.linalg.eigvalsh(joint_second_moment(activations, shifts).double())[-1])
