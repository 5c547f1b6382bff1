"""Eigen-solvers and trace estimation for curvature operators.

* :func:`top_eigenvalues` with ``method="lanczos"`` (default): Lanczos with full
  re-orthogonalisation (classical Gram–Schmidt applied twice against every stored basis
  vector). It costs one product per step plus ``O(step · dim)`` vector work, and it
  converges on the top of the spectrum far faster than power iteration when the leading
  eigenvalues are close; memory is ``max_iter`` vectors of length ``dim``.
* ``method="power"``: power iteration with deflation against already found vectors (the
  scheme of PyHessian). One vector of memory, but the convergence rate is
  ``|λ₂/λ₁|`` per product, and it finds the eigenvalues largest in *magnitude*.

Both stop when every wanted Ritz pair ``(θ, u)`` has residual ``‖Au − θu‖ ≤ tol·|θ|``.
For a symmetric operator this guarantees an eigenvalue within ``tol·|θ|`` of ``θ``
(relative accuracy ``tol``; in practice the eigenvalue error is nearer ``residual²/gap``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from actlab.curvature.operators import CurvatureOperator

_METHODS = ("lanczos", "power")
_WHICH = ("largest", "magnitude")


@dataclass
class EigenInfo:
    """How an eigen-solver run went.

    ``matvecs``: operator products used; ``iterations``: Lanczos steps (or power
    iterations summed over eigenpairs); ``converged``: all wanted pairs met ``tol``;
    ``residuals``: final relative residuals ``‖Au − θu‖/|θ|`` of the returned pairs.
    """

    method: str
    matvecs: int
    iterations: int
    converged: bool
    residuals: list[float] = field(default_factory=list)


def _random_unit(dim: int, like: CurvatureOperator, generator: torch.Generator | None) -> torch.Tensor:
    v = torch.randn(dim, generator=generator, dtype=torch.float64)
    v = v.to(dtype=like.dtype, device=like.device)
    return v / v.norm()


def _start_unit(start: torch.Tensor, like: CurvatureOperator) -> torch.Tensor:
    if start.shape != (like.dim,):
        raise ValueError(f"start: needs shape ({like.dim},), got {tuple(start.shape)}")
    v = start.detach().to(dtype=like.dtype, device=like.device)
    norm = v.norm()
    # a meta tensor (the shape walk of a paper-size run) has no values to check
    if v.device.type != "meta" and (not torch.isfinite(norm) or norm == 0):
        raise ValueError("start: needs a finite, non-zero vector")
    return v / norm


def warm_start(vectors: torch.Tensor, generator: torch.Generator | None = None,
               noise: float = 1e-2) -> torch.Tensor:
    """A Lanczos start vector from the previous top eigenvectors ``vectors`` (``(dim, k)``).

    Their sum, each with unit weight, plus ``noise`` times a random unit vector: the Krylov
    space then holds the old top-``k`` directions after ``k`` products (exactly the new ones
    when they have not moved), and the random part keeps it from being stuck in them when
    they have.
    """
    total = vectors.sum(dim=1)
    r = torch.randn(vectors.shape[0], generator=generator, dtype=torch.float64)
    r = r.to(dtype=vectors.dtype, device=vectors.device)
    return total / total.norm() + noise * r / r.norm()


def _check(op: CurvatureOperator, k: int, tol: float) -> None:
    if k < 1 or k > op.dim:
        raise ValueError(f"k must be in [1, dim={op.dim}], got {k}")
    if not tol > 0:
        raise ValueError(f"tol must be > 0, got {tol}")


def top_eigenvalues(
    op: CurvatureOperator,
    k: int = 1,
    method: str = "lanczos",
    tol: float = 1e-6,
    max_iter: int | None = None,
    generator: torch.Generator | None = None,
    which: str = "largest",
    start: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, EigenInfo]:
    """The ``k`` top eigenpairs of a symmetric operator.

    Returns ``(values, vectors, info)``: ``values`` sorted descending (length ``k``),
    ``vectors`` of shape ``(dim, k)`` with unit columns (``vectors[:, i]`` belongs to
    ``values[i]``), and an :class:`EigenInfo`. ``which="largest"`` (default) means largest
    algebraic (sharpness); ``"magnitude"`` largest ``|λ|``; power iteration only supports
    ``"magnitude"`` semantics and is flagged so in the docs. ``max_iter`` bounds Lanczos
    steps (default ``min(dim, max(100, 4k))``) or power iterations per eigenpair (default
    1000). ``generator`` seeds the start vector; Lanczos takes ``start`` instead (a warm
    start, e.g. :func:`warm_start` of the previous checkpoint's vectors).
    """
    _check(op, k, tol)
    if method not in _METHODS:
        raise ValueError(f"unknown method {method!r}; valid: {', '.join(_METHODS)}")
    if which not in _WHICH:
        raise ValueError(f"unknown which {which!r}; valid: {', '.join(_WHICH)}")
    if method == "lanczos":
        return lanczos(op, k, tol=tol, max_iter=max_iter, generator=generator, which=which,
                       start=start)
    if start is not None:
        raise ValueError("start: only the lanczos method takes a start vector")
    return power_iteration(op, k, tol=tol, max_iter=max_iter or 1000, generator=generator)


def _orthogonalize(w: torch.Tensor, basis: torch.Tensor) -> torch.Tensor:
    """Remove from ``w`` its components on the rows of ``basis`` (twice: "twice is enough")."""
    for _ in range(2):
        w = w - basis.T @ (basis @ w)
    return w


def lanczos_tridiagonal(
    op: CurvatureOperator,
    steps: int,
    start: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Run ``steps`` Lanczos steps from ``start``; return ``(alphas, betas, basis)``.

    ``basis`` has the orthonormal Lanczos vectors as rows. Stops early (fewer rows) when
    the Krylov space becomes invariant. Used by the spectral density (SLQ).
    """
    basis = torch.empty(steps, op.dim, dtype=op.dtype, device=op.device)
    alphas: list[float] = []
    betas: list[float] = []
    q = start / start.norm()
    for j in range(steps):
        basis[j] = q
        w = op.matvec(q)
        alpha = torch.dot(w, q)
        alphas.append(float(alpha))
        w = _orthogonalize(w, basis[: j + 1])
        beta = float(w.norm())
        if j == steps - 1:
            break
        if beta <= 1e-12 * max(1.0, abs(alphas[0])):
            break
        betas.append(beta)
        q = w / beta
    n = len(alphas)
    return (
        torch.tensor(alphas, dtype=torch.float64),
        torch.tensor(betas[: n - 1], dtype=torch.float64),
        basis[:n],
    )


def _tridiag(alphas: list[float], betas: list[float]) -> torch.Tensor:
    n = len(alphas)
    t = torch.diag(torch.tensor(alphas, dtype=torch.float64))
    if n > 1:
        off = torch.tensor(betas[: n - 1], dtype=torch.float64)
        t += torch.diag(off, 1) + torch.diag(off, -1)
    return t


def lanczos(
    op: CurvatureOperator,
    k: int = 1,
    tol: float = 1e-6,
    max_iter: int | None = None,
    generator: torch.Generator | None = None,
    which: str = "largest",
    start: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, EigenInfo]:
    """Top-``k`` eigenpairs by Lanczos with full re-orthogonalisation (see :func:`top_eigenvalues`).

    Convergence is checked after every step from the Ritz residual estimate
    ``|β_j · s_{j,i}|`` (no extra products).
    """
    _check(op, k, tol)
    dim = op.dim
    steps = min(dim, max_iter if max_iter is not None else max(100, 4 * k))
    if steps < k:
        raise ValueError(f"max_iter={steps} is smaller than k={k}")
    start_matvecs = op.n_matvecs
    basis = torch.empty(steps, dim, dtype=op.dtype, device=op.device)
    alphas: list[float] = []
    betas: list[float] = []
    q = _random_unit(dim, op, generator) if start is None else _start_unit(start, op)
    converged = False
    theta = s = None
    rel_res: list[float] = []
    for j in range(steps):
        basis[j] = q
        w = op.matvec(q)
        alphas.append(float(torch.dot(w, q)))
        w = _orthogonalize(w, basis[: j + 1])
        beta = float(w.norm())
        if j + 1 >= k:
            theta, s = torch.linalg.eigh(_tridiag(alphas, betas))
            order = _wanted_order(theta, which)[:k]
            scale = theta.abs().max().clamp_min(1e-300)
            rel_res = [
                beta * abs(float(s[-1, i])) / max(abs(float(theta[i])), 1e-12 * float(scale))
                for i in order
            ]
            invariant = beta <= 1e-12 * float(scale)
            if invariant or max(rel_res) <= tol:
                converged = True
                break
        if beta == 0.0:
            break
        betas.append(beta)
        q = w / beta
    n = len(alphas)
    if theta is None or s is None:  # pragma: no cover - steps >= k guarantees one check
        raise RuntimeError("Lanczos made no progress")
    order = _wanted_order(theta, which)[:k]
    values = theta[order]
    ritz = basis[:n].T @ s[:, order].to(dtype=op.dtype, device=op.device)
    ritz = ritz / ritz.norm(dim=0, keepdim=True)
    values_sorted, perm = torch.sort(values, descending=True)
    info = EigenInfo("lanczos", op.n_matvecs - start_matvecs, n, converged, [rel_res[int(i)] for i in perm])
    return values_sorted.to(op.dtype), ritz[:, perm], info


def _wanted_order(theta: torch.Tensor, which: str) -> torch.Tensor:
    key = theta if which == "largest" else theta.abs()
    return torch.argsort(key, descending=True)


def power_iteration(
    op: CurvatureOperator,
    k: int = 1,
    tol: float = 1e-6,
    max_iter: int = 1000,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor, EigenInfo]:
    """Top-``k`` eigenpairs by *magnitude* with power iteration and deflation.

    Each pair starts from a random unit vector, orthogonalised against the vectors already
    found before every product (PyHessian's deflation); the Rayleigh quotient ``θ = vᵀAv``
    is accepted when ``‖Av − θv‖ ≤ tol·|θ|`` or after ``max_iter`` products (pairs other
    than the last use ``tol/100``, since their error leaks into later pairs).
    """
    _check(op, k, tol)
    start_matvecs = op.n_matvecs
    found: list[torch.Tensor] = []
    values: list[float] = []
    rel_res: list[float] = []
    iterations = 0
    all_converged = True
    for pair in range(k):
        # An earlier pair's error leaks into every later one through the deflation, so all
        # but the last pair are converged 100× tighter.
        pair_tol = tol if pair == k - 1 else tol / 100
        v = _random_unit(op.dim, op, generator)
        ok = False
        theta = 0.0
        res = math.inf
        for _ in range(max_iter):
            if found:
                v = _orthogonalize(v, torch.stack(found))
                v = v / v.norm()
            w = op.matvec(v)
            iterations += 1
            theta = float(torch.dot(w, v))
            res = float((w - theta * v).norm()) / max(abs(theta), 1e-300)
            norm = w.norm()
            if res <= pair_tol or norm == 0:
                ok = True
                break
            v = w / norm
        all_converged &= ok
        found.append(v)
        values.append(theta)
        rel_res.append(res)
    vals = torch.tensor(values, dtype=torch.float64)
    vals_sorted, perm = torch.sort(vals, descending=True)
    vecs = torch.stack(found, dim=1)[:, perm]
    info = EigenInfo("power", op.n_matvecs - start_matvecs, iterations, all_converged, [rel_res[int(i)] for i in perm])
    return vals_sorted.to(op.dtype), vecs, info


@dataclass
class TraceEstimate:
    """Hutchinson trace estimate: ``mean`` of ``vᵀAv`` over probes and its standard error."""

    mean: float
    std_error: float
    samples: list[float]
    matvecs: int


def hutchinson_trace(
    op: CurvatureOperator,
    n_samples: int = 100,
    generator: torch.Generator | None = None,
    distribution: str = "rademacher",
) -> TraceEstimate:
    """Unbiased estimate of ``tr(A)`` from ``n_samples`` random probes ``v`` (``E[vvᵀ] = I``).

    ``distribution``: ``"rademacher"`` (±1 entries; lowest variance, exact for diagonal
    matrices) or ``"gaussian"``.
    """
    if n_samples < 1:
        raise ValueError(f"n_samples must be >= 1, got {n_samples}")
    if distribution not in ("rademacher", "gaussian"):
        raise ValueError(f"unknown distribution {distribution!r}; valid: rademacher, gaussian")
    start = op.n_matvecs
    samples = []
    for _ in range(n_samples):
        if distribution == "rademacher":
            v = torch.randint(0, 2, (op.dim,), generator=generator).to(torch.float64) * 2 - 1
        else:
            v = torch.randn(op.dim, generator=generator, dtype=torch.float64)
        v = v.to(dtype=op.dtype, device=op.device)
        samples.append(float(torch.dot(v, op.matvec(v))))
    t = torch.tensor(samples, dtype=torch.float64)
    std_error = float(t.std(unbiased=True) / math.sqrt(n_samples)) if n_samples > 1 else math.inf
    return TraceEstimate(float(t.mean()), std_error, samples, op.n_matvecs - start)
