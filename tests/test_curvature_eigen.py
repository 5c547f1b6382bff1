"""Eigen-solvers, Hutchinson trace and SLQ density against dense eigendecompositions (float64)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from actlab.curvature import (
    DenseOperator,
    GaussNewtonOperator,
    HessianOperator,
    hutchinson_trace,
    spectral_density,
    top_eigenvalues,
    warm_start,
)


def small_model_and_batches(seed=0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3)).double()
    g = torch.Generator().manual_seed(seed + 10)
    batches = [
        (torch.randn(n, 4, generator=g, dtype=torch.float64), torch.randn(n, 3, generator=g, dtype=torch.float64))
        for n in (8, 5)
    ]
    return model, batches


@pytest.fixture(scope="module")
def hessian_and_dense():
    model, batches = small_model_and_batches()
    op = HessianOperator(model, "mse", batches)
    # Dense reference from autograd's own Hessian of the flat-parameter loss.
    names = [n for n, _ in model.named_parameters()]
    params = dict(model.named_parameters())
    shapes = [params[n].shape for n in names]
    numels = [params[n].numel() for n in names]
    theta = torch.cat([params[n].detach().reshape(-1) for n in names])

    def loss(flat):
        p = dict(zip(names, (c.view(s) for c, s in zip(torch.split(flat, numels), shapes))))
        total = 0.0
        for x, y in batches:
            out = torch.func.functional_call(model, p, (x,))
            total = total + x.shape[0] / 13 * ((out - y) ** 2).mean()
        return total

    dense = torch.autograd.functional.hessian(loss, theta)
    return op, dense, torch.linalg.eigvalsh(dense)


def test_lanczos_top1_and_topk_match_dense(hessian_and_dense):
    op, dense, evals = hessian_and_dense
    torch.testing.assert_close(op.to_dense(), dense, rtol=1e-10, atol=1e-12)
    top = evals.flip(0)
    vals, vecs, info = top_eigenvalues(op, k=1, generator=torch.Generator().manual_seed(0))
    assert abs(float(vals[0]) - float(top[0])) <= 1e-6 * abs(float(top[0]))
    assert info.converged and info.matvecs == info.iterations
    k = 4
    vals, vecs, info = top_eigenvalues(op, k=k, tol=1e-9, generator=torch.Generator().manual_seed(1))
    rel = (vals - top[:k]).abs() / top[:k].abs()
    assert rel.max() <= 1e-6, rel
    # Ritz vectors are eigenvectors: ‖Hv − λv‖ small and columns orthonormal.
    hv = dense @ vecs
    assert (hv - vecs * vals).norm(dim=0).max() <= 1e-5 * float(top[0])
    torch.testing.assert_close(vecs.T @ vecs, torch.eye(k, dtype=torch.float64), atol=1e-8, rtol=0)


def test_lanczos_counts_matvecs_and_beats_dimension(hessian_and_dense):
    op, _, evals = hessian_and_dense
    before = op.n_matvecs
    _, _, info = top_eigenvalues(op, k=1, tol=1e-8, generator=torch.Generator().manual_seed(2))
    assert info.matvecs == op.n_matvecs - before
    assert info.matvecs < op.dim  # converged before exhausting the space


def test_lanczos_finds_most_negative_with_magnitude():
    d = torch.diag(torch.tensor([-5.0, 1.0, 2.0, 3.0, 0.5], dtype=torch.float64))
    q, _ = torch.linalg.qr(torch.randn(5, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0)))
    op = DenseOperator(q @ d @ q.T)
    vals, _, _ = top_eigenvalues(op, k=1, which="magnitude", generator=torch.Generator().manual_seed(0))
    assert float(vals[0]) == pytest.approx(-5.0, rel=1e-9)
    vals, _, _ = top_eigenvalues(op, k=2, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(vals, torch.tensor([3.0, 2.0], dtype=torch.float64), rtol=1e-9, atol=0)


def test_power_iteration_on_gauss_newton_matches_dense():
    model, batches = small_model_and_batches(seed=0)  # λ₂/λ₁ ≈ 0.80, λ₃/λ₂ ≈ 0.88
    op = GaussNewtonOperator(model, "mse", batches)
    evals = torch.linalg.eigvalsh(op.to_dense()).flip(0)
    # Residual ≤ tol·|θ| bounds the eigenvalue error by the same amount. (Deflation leaks
    # the first vector's error into the second pair, so tol cannot go much lower for k=2.)
    vals, _, info = top_eigenvalues(op, k=2, method="power", tol=1e-6, max_iter=600,
                                    generator=torch.Generator().manual_seed(0))
    assert info.method == "power" and info.converged
    rel = (vals - evals[:2]).abs() / evals[:2]
    assert rel.max() <= 1e-6, rel


def test_bad_arguments_raise():
    op = DenseOperator(torch.eye(3, dtype=torch.float64))
    with pytest.raises(ValueError, match="lanczos"):
        top_eigenvalues(op, method="lanczoz")
    with pytest.raises(ValueError, match="k must be"):
        top_eigenvalues(op, k=4)


def test_hutchinson_trace():
    diag = torch.tensor([1.0, -2.0, 3.5, 0.25], dtype=torch.float64)
    est = hutchinson_trace(DenseOperator(torch.diag(diag)), n_samples=3, generator=torch.Generator().manual_seed(0))
    # Rademacher probes are exact for a diagonal matrix: vᵀDv = Σ d_i.
    assert est.samples == pytest.approx([float(diag.sum())] * 3, rel=1e-12)
    a = torch.randn(30, 30, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    a = a + a.T
    est = hutchinson_trace(DenseOperator(a), n_samples=400, generator=torch.Generator().manual_seed(2))
    assert abs(est.mean - float(torch.trace(a))) <= 4 * est.std_error
    assert est.matvecs == 400


def test_slq_quadrature_is_exact_for_low_moments(hessian_and_dense):
    _, dense, evals = hessian_and_dense
    op = DenseOperator(dense)
    steps = 6
    sd = spectral_density(op, n_probes=1, n_steps=steps, generator=torch.Generator().manual_seed(0))
    assert float(sd.weights[0].sum()) == pytest.approx(1.0, abs=1e-12)
    # Gauss quadrature with m nodes reproduces vᵀA^p v/‖v‖² for p < 2m; probe is ±1 so ‖v‖² = dim.
    g = torch.Generator().manual_seed(0)
    v = torch.randint(0, 2, (op.dim,), generator=g).to(torch.float64) * 2 - 1
    for p in range(2 * steps):
        exact = float(v @ torch.linalg.matrix_power(dense, p) @ v) / op.dim
        assert sd.moment(p) == pytest.approx(exact, rel=1e-7, abs=1e-10)
    # With as many steps as dimensions, the nodes are the eigenvalues themselves.
    full = spectral_density(op, n_probes=2, n_steps=op.dim, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(full.nodes[0], evals, rtol=1e-7, atol=1e-9)
    grid = torch.linspace(float(evals[0]) - 1, float(evals[-1]) + 1, 2001)
    dens = full.evaluate(grid, sigma=0.05)
    assert float(torch.trapezoid(dens, grid)) == pytest.approx(1.0, abs=1e-3)


def test_a_warm_start_from_the_previous_vectors_saves_products_and_keeps_the_values():
    # A slowly drifting spectrum (two checkpoints of one model): 200 x 200, top 5 well apart.
    g = torch.Generator().manual_seed(3)
    q, _ = torch.linalg.qr(torch.randn(200, 200, dtype=torch.float64, generator=g))
    spectrum = torch.cat([torch.tensor([9.0, 7.0, 5.5, 4.5, 3.8]),
                          torch.linspace(0.01, 2.0, 195)]).double()
    before = DenseOperator(q @ torch.diag(spectrum) @ q.T)
    turn, _ = torch.linalg.qr(torch.eye(200, dtype=torch.float64)
                              + 0.01 * torch.randn(200, 200, dtype=torch.float64, generator=g))
    q2 = turn @ q
    after = DenseOperator(q2 @ torch.diag(spectrum * 1.05) @ q2.T)
    exact = (spectrum * 1.05).sort(descending=True).values[:5]
    _, old_vectors, _ = top_eigenvalues(before, k=5, tol=1e-8, max_iter=200,
                                        generator=torch.Generator().manual_seed(0))
    cold, _, cold_info = top_eigenvalues(after, k=5, tol=1e-8, max_iter=200,
                                         generator=torch.Generator().manual_seed(0))
    warm, _, warm_info = top_eigenvalues(after, k=5, tol=1e-8, max_iter=200,
                                         start=warm_start(old_vectors, torch.Generator().manual_seed(0)))
    torch.testing.assert_close(cold, exact, rtol=1e-7, atol=0)
    torch.testing.assert_close(warm, exact, rtol=1e-7, atol=0)
    assert warm_info.converged and warm_info.matvecs < cold_info.matvecs
    with pytest.raises(ValueError, match="start"):
        top_eigenvalues(after, k=1, start=torch.zeros(200, dtype=torch.float64))
    with pytest.raises(ValueError, match="start"):
        top_eigenvalues(after, k=1, method="power", start=old_vectors[:, 0])
