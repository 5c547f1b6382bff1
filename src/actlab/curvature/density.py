"""Spectral density of a curvature operator by stochastic Lanczos quadrature (SLQ).

For a unit probe ``v``, ``m`` Lanczos steps give a tridiagonal ``T`` whose eigenvalues
``θ_i`` (nodes) and squared first eigenvector components ``τ_i²`` (weights) form a Gauss
quadrature rule: ``vᵀ f(A) v ≈ Σ τ_i² f(θ_i)``, exact for polynomials of degree
``< 2m``. Averaging the rules over random probes estimates the spectral measure
``(1/dim) Σ_j δ(λ - λ_j)``; a Gaussian of width ``sigma`` turns it into a smooth density.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from actlab.curvature.eigen import lanczos_tridiagonal
from actlab.curvature.operators import CurvatureOperator


@dataclass
class SpectralDensity:
    """Quadrature nodes and weights per probe (each row of ``weights`` sums to one)."""

    nodes: list[torch.Tensor]
    weights: list[torch.Tensor]
    dim: int
    matvecs: int

    def moment(self, power: int) -> float:
        """Estimate of ``tr(A^power) / dim`` (average over probes)."""
        vals = [float((w * n.pow(power)).sum()) for n, w in zip(self.nodes, self.weights)]
        return sum(vals) / len(vals)

    def evaluate(self, grid: torch.Tensor, sigma: float) -> torch.Tensor:
        """Density on ``grid`` with Gaussian broadening of width ``sigma`` (integrates to ~1)."""
        if not sigma > 0:
            raise ValueError(f"sigma must be > 0, got {sigma}")
        grid = grid.to(torch.float64)
        total = torch.zeros_like(grid)
        for n, w in zip(self.nodes, self.weights):
            z = (grid[:, None] - n[None, :]) / sigma
            total += (w[None, :] * torch.exp(-0.5 * z * z)).sum(1)
        return total / (len(self.nodes) * sigma * (2 * torch.pi) ** 0.5)


def spectral_density(
    op: CurvatureOperator,
    n_probes: int = 1,
    n_steps: int = 80,
    generator: torch.Generator | None = None,
) -> SpectralDensity:
    """Stochastic Lanczos quadrature with ``n_probes`` Rademacher probes of ``n_steps`` steps."""
    if n_probes < 1 or n_steps < 1:
        raise ValueError(f"n_probes and n_steps must be >= 1, got {n_probes}, {n_steps}")
    start = op.n_matvecs
    nodes, weights = [], []
    for _ in range(n_probes):
        v = torch.randint(0, 2, (op.dim,), generator=generator).to(torch.float64) * 2 - 1
        v = v.to(dtype=op.dtype, device=op.device)
        alphas, betas, _ = lanczos_tridiagonal(op, min(n_steps, op.dim), v)
        t = torch.diag(alphas)
        if len(betas):
            t += torch.diag(betas, 1) + torch.diag(betas, -1)
        theta, s = torch.linalg.eigh(t)
        nodes.append(theta)
        weights.append(s[0] ** 2)
    return SpectralDensity(nodes, weights, op.dim, op.n_matvecs - start)
