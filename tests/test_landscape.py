"""Loss planes, the initial-gradient plane (eq. 4), trajectory projection and eq. 5's off-plane basis."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from actlab.curvature import (
    filter_normalized_direction,
    flat_gradient,
    initial_gradient_plane,
    loss_plane,
    offplane_plane,
    plot_plane,
    project_trajectory,
)
from actlab.curvature.functional import FunctionalModel


def model_and_batches(seed=0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.LayerNorm(4), nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).double()
    g = torch.Generator().manual_seed(seed + 1)
    batches = [
        (torch.randn(n, 4, generator=g, dtype=torch.float64), torch.randn(n, 2, generator=g, dtype=torch.float64))
        for n in (10, 6)
    ]
    return model, batches


def reference_loss(model, batches, flat):
    """Loss with the parameters written into a deep copy (an independent path)."""
    clone = copy.deepcopy(model)
    torch.nn.utils.vector_to_parameters(flat, clone.parameters())
    total = sum(x.shape[0] for x, _ in batches)
    with torch.no_grad():
        return sum(x.shape[0] / total * float(((clone(x) - y) ** 2).mean()) for x, y in batches)


def test_loss_plane_values_and_model_untouched():
    model, batches = model_and_batches()
    model.train()
    before = [p.detach().clone() for p in model.parameters()]
    theta0 = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
    g = torch.Generator().manual_seed(5)
    d1 = torch.randn(theta0.numel(), generator=g, dtype=torch.float64)
    d2 = torch.randn(theta0.numel(), generator=g, dtype=torch.float64)
    alphas, betas = [-0.5, 0.0, 0.25], [-0.3, 0.4]
    grid = loss_plane(model, "mse", batches, d1, d2, alphas, betas)
    assert grid.loss.shape == (2, 3)
    for i, b in enumerate(betas):
        for j, a in enumerate(alphas):
            ref = reference_loss(model, batches, theta0 + a * d1 + b * d2)
            assert float(grid.loss[i, j]) == pytest.approx(ref, rel=1e-12)
    # Bit-identical parameters, no gradients, mode kept.
    for p, q in zip(model.parameters(), before):
        assert torch.equal(p, q) and p.grad is None
    assert model.training


def test_loss_plane_with_parameter_subset_and_dict_directions():
    model, batches = model_and_batches()
    names = ["3.weight", "3.bias"]
    params = dict(model.named_parameters())
    d1 = {n: torch.ones_like(params[n]) for n in names}
    d2 = {n: torch.zeros_like(params[n]) for n in names}
    grid = loss_plane(model, "mse", batches, d1, d2, [0.1], [0.0], params=names)
    full = torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone()
    offset = sum(params[n].numel() for n, _ in list(model.named_parameters())[:-2])
    full[offset:] += 0.1
    assert float(grid.loss[0, 0]) == pytest.approx(reference_loss(model, batches, full), rel=1e-12)


def test_filter_normalization_matches_filter_norms():
    model, _ = model_and_batches()
    fm = FunctionalModel(model)
    theta = fm.flat_params()
    d = torch.randn(fm.dim, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    dn = fm.layout.unflatten(filter_normalized_direction(d, theta, fm))
    for name, p in dict(model.named_parameters()).items():
        if p.ndim <= 1:
            assert torch.count_nonzero(dn[name]) == 0
        else:
            torch.testing.assert_close(dn[name].norm(dim=1), p.detach().norm(dim=1), rtol=1e-12, atol=0)


def test_initial_gradient_plane_is_orthonormal_and_spans_both_gradients():
    model_u, batches = model_and_batches(0)
    model_s, _ = model_and_batches(3)
    g_u, g_s = flat_gradient(model_u, "mse", batches), flat_gradient(model_s, "mse", batches)
    e1, e2 = initial_gradient_plane(g_u, g_s)
    assert abs(float(e1 @ e2)) <= 1e-12
    assert float(e1.norm()) == pytest.approx(1.0, abs=1e-12)
    assert float(e2.norm()) == pytest.approx(1.0, abs=1e-12)
    torch.testing.assert_close(e1, g_u / g_u.norm())
    # g_s lies in span(e1, e2) and has a positive e2 component.
    coef = torch.stack([e1, e2]) @ g_s
    torch.testing.assert_close(coef[0] * e1 + coef[1] * e2, g_s, rtol=1e-10, atol=1e-12)
    assert coef[1] > 0
    with pytest.raises(ValueError, match="parallel"):
        initial_gradient_plane(g_u, 2 * g_u)


def test_flat_gradient_matches_autograd():
    model, batches = model_and_batches()
    total = sum(x.shape[0] for x, _ in batches)
    loss = sum(x.shape[0] / total * ((model(x) - y) ** 2).mean() for x, y in batches)
    ref = torch.autograd.grad(loss, list(model.parameters()))
    torch.testing.assert_close(flat_gradient(model, "mse", batches), torch.cat([r.reshape(-1) for r in ref]))
    assert all(p.grad is None for p in model.parameters())


def test_project_trajectory_and_offplane_basis():
    g = torch.Generator().manual_seed(0)
    dim = 50
    theta0 = torch.randn(dim, generator=g, dtype=torch.float64)
    e1, e2 = initial_gradient_plane(torch.randn(dim, generator=g, dtype=torch.float64),
                                    torch.randn(dim, generator=g, dtype=torch.float64))
    coords = torch.tensor([[0.0, 0.0], [0.5, -1.0], [2.0, 0.3]], dtype=torch.float64)
    off = torch.randn(3, dim, generator=g, dtype=torch.float64)
    off = off - (off @ e1)[:, None] * e1 - (off @ e2)[:, None] * e2
    off[0] = 0.0
    traj = [theta0 + c[0] * e1 + c[1] * e2 + o for c, o in zip(coords, off)]
    torch.testing.assert_close(project_trajectory(traj, theta0, e1, e2), coords, rtol=1e-10, atol=1e-12)
    n1, n2 = offplane_plane(traj, theta0, e1, e2)
    basis = torch.stack([e1, e2, n1, n2])
    torch.testing.assert_close(basis @ basis.T, torch.eye(4, dtype=torch.float64), atol=1e-12, rtol=0)
    # n1 is the normalised first non-zero off-plane displacement (eq. 5), n2 completes the second.
    torch.testing.assert_close(n1, off[1] / off[1].norm(), rtol=1e-10, atol=1e-12)
    r2 = off[2]
    torch.testing.assert_close((r2 @ n1) * n1 + (r2 @ n2) * n2, r2, rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="independent"):
        offplane_plane(traj[:2], theta0, e1, e2)


def test_plot_plane_writes_png(tmp_path):
    model, batches = model_and_batches()
    d1, d2 = initial_gradient_plane(flat_gradient(model, "mse", batches),
                                    torch.randn(sum(p.numel() for p in model.parameters()), dtype=torch.float64))
    grid = loss_plane(model, "mse", batches, d1, d2, torch.linspace(-1, 1, 5), torch.linspace(-1, 1, 4))
    fig = plot_plane(grid, trajectories={"student": torch.tensor([[0.0, 0.0], [-0.5, 0.2]])}, title="t")
    path = tmp_path / "plane.png"
    fig.savefig(path)
    assert path.stat().st_size > 1000
