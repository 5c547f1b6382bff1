"""Gaussian expectations ``E[g(z)]``, ``z ~ N(0, q)``: the one quadrature every average uses.

Every average is folded onto the positive half line,

    E[g(z)] = ∫_0^∞ (g(σt) + g(-σt)) φ(t) dt,   σ = sqrt(q),

so that a kink at z = 0 (ReLU and its relatives) sits on the end of the interval, where it
costs nothing. The half line is cut at t = 13 (φ(13) < 1e-37) and integrated by adaptive
composite Gauss–Legendre quadrature in float64: a panel is accepted when its 16-point value
agrees with the sum over its two halves, otherwise it is bisected. Integrands that are smooth
on each side of 0 converge to rounding (about 1e-15); a kink elsewhere is found by bisection
and still reaches about 1e-12.

This module imports nothing from actlab, so the activation registry (``shift=theory``) and
the theory code can both use it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch

Elementwise = Callable[[torch.Tensor], torch.Tensor]

# Half line cut-off and the initial panels (finer near 0 where the density is largest).
_T_MAX = 13.0
_INITIAL_EDGES = (0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 10.0, _T_MAX)
_ORDER = 16
_REL_TOL = 1e-14
_MAX_ROUNDS = 60
_NODES, _WEIGHTS = np.polynomial.legendre.leggauss(_ORDER)


def _check_variance(q: float) -> float:
    q = float(q)
    if not math.isfinite(q) or q < 0:
        raise ValueError(f"q: the pre-activation variance must be finite and >= 0, got {q}")
    return q


def gaussian_expectations(integrands: list[Elementwise], q: float) -> list[float]:
    """``E[g(z)]`` for each ``g`` in ``integrands`` and ``z ~ N(0, q)``, by folded adaptive quadrature.

    Each ``g`` maps a float64 tensor to a float64 tensor elementwise. All integrands share
    the panels, and a panel is refined until every integrand has converged on it.
    """
    q = _check_variance(q)
    if q == 0.0:
        zero = torch.zeros(1, dtype=torch.float64)
        return [float(g(zero)[0]) for g in integrands]
    sigma = math.sqrt(q)

    def panel_values(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        # Gauss–Legendre nodes of every panel at once: shape (panels, order).
        half = (hi - lo)[:, None] / 2
        t = (lo + hi)[:, None] / 2 + half * _NODES[None, :]
        density = np.exp(-0.5 * t * t) / math.sqrt(2 * math.pi)
        z = torch.from_numpy(sigma * t.ravel())
        out = []
        for g in integrands:
            with torch.no_grad():
                folded = (g(z) + g(-z)).detach().numpy().reshape(t.shape)
            out.append(((folded * density) * _WEIGHTS[None, :]).sum(axis=1) * half[:, 0])
        return np.stack(out)  # (integrands, panels)

    edges = np.asarray(_INITIAL_EDGES)
    lo, hi = edges[:-1], edges[1:]
    whole = panel_values(lo, hi)
    totals = np.zeros(len(integrands))
    for _ in range(_MAX_ROUNDS):
        mid = (lo + hi) / 2
        halves = panel_values(np.concatenate([lo, mid]), np.concatenate([mid, hi]))
        n = len(lo)
        left, right = halves[:, :n], halves[:, n:]
        refined = left + right
        scale = np.maximum(np.abs(totals) + np.abs(refined).sum(axis=1), 1e-300)[:, None]
        ok = np.all(np.abs(refined - whole) <= _REL_TOL * scale, axis=0)
        ok |= ~np.isfinite(refined).all(axis=0)  # nothing to gain from refining nan/inf
        totals += refined[:, ok].sum(axis=1)
        if ok.all():
            break
        keep = ~ok
        lo = np.concatenate([lo[keep], mid[keep]])
        hi = np.concatenate([mid[keep], hi[keep]])
        whole = np.concatenate([left[:, keep], right[:, keep]], axis=1)
    else:  # not converged: use the finest estimate (kinks of user functions, nan)
        totals += whole.sum(axis=1)
    return [float(v) for v in totals]


def expectation(function: Elementwise, q: float = 1.0) -> float:
    """``E[function(z)]`` for ``z ~ N(0, q)``; ``function`` acts elementwise on float64 tensors."""
    return gaussian_expectations([function], q)[0]
