"""App. B.1.2-B.1.4 of "Rethinking Activation Functions" (eqs. 37, 38, 42-46, 49) against dense
matrices: Gauss-Newton from explicit Jacobians (jacrev), Hessians from
torch.autograd.functional.hessian, eigenvalues from torch.linalg.eigvalsh."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from actlab.nn.one_block import OneBlock
from actlab.theory.curvature import (
    OneBlockCurvature,
    gauss_newton_bounds,
    joint_down_projection_hessian,
    joint_down_projection_sharpness,
    joint_second_moment,
    mean_shift_gap_bound,
    minimise_convex,
    stacked_covariance,
)

F64 = torch.float64


# Dense eigen-solves of a few hundred rows run fastest on one thread.
pytestmark = pytest.mark.usefixtures("one_thread")


def setup(d_in, m, d_out, seed=0, n=64, activation="relu", spread=0.0):
    """Inputs, a one-block student (unshifted, b added by hand) and a teacher's targets.

    ``spread`` moves the student away from the teacher (larger residuals)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d_in, generator=g, dtype=F64)
    student = OneBlock(d_in, m, d_out, activation, generator=g).double()
    teacher = OneBlock(d_in, m, d_out, activation, generator=g).double()
    with torch.no_grad():
        y = teacher(x) + spread * torch.randn(n, d_out, generator=g, dtype=F64)
    return x, y, student.up.weight.detach(), student.down.weight.detach(), student.act


def flat_fn(A, B, act, b, x):
    """``θ ↦ f(x)`` on the flat ``(vec A, vec B)`` (row-major), the order of OneBlockCurvature."""
    n_a = A.numel()

    def fn(theta):
        a = act(x @ theta[:n_a].reshape(A.shape).T) - b
        return a @ theta[n_a:].reshape(B.shape).T

    return fn, torch.cat([A.reshape(-1), B.reshape(-1)])


def dense_gn(A, B, act, b, x):
    """E[JᵀJ] from the explicit per-sample output Jacobian."""
    fn, theta = flat_fn(A, B, act, b, x)
    jac = torch.func.jacrev(fn)(theta)  # (n, d_out, P)
    return torch.einsum("nop,noq->pq", jac, jac) / x.shape[0]


def dense_hessian(A, B, act, b, x, y):
    """The Hessian of ½E‖f − y‖² by autograd."""
    fn, theta = flat_fn(A, B, act, b, x)
    return torch.autograd.functional.hessian(
        lambda t: 0.5 * (fn(t) - y).pow(2).sum(1).mean(), theta
    )


def top(matrix):
    return float(torch.linalg.eigvalsh(matrix)[-1])


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_gauss_newton_and_hessian_are_the_dense_ones(activation):
    x, y, A, B, act = setup(4, 6, 3, activation=activation, spread=0.5)
    curv = OneBlockCurvature(x, A, B, act)
    for b in (-0.3, 0.0, 0.23, 0.9):
        torch.testing.assert_close(
            curv.gauss_newton(b), dense_gn(A, B, act, b, x), rtol=1e-11, atol=1e-12
        )
        torch.testing.assert_close(
            curv.hessian(b, y), dense_hessian(A, B, act, b, x, y), rtol=1e-10, atol=1e-11
        )
    h = curv.hessian(0.3, y)
    n_a = A.numel()
    # H_BB = G_BB always; H_AA = G_AA only with fixed gates (ReLU), never for GELU here.
    torch.testing.assert_close(h[n_a:, n_a:], curv.gauss_newton(0.3)[n_a:, n_a:])
    aa_gap = float((h[:n_a, :n_a] - curv.g_aa).abs().max())
    assert aa_gap == 0.0 if activation == "relu" else aa_gap > 1e-4
    assert curv.lambda_a == pytest.approx(top(curv.g_aa), rel=1e-12)
    assert curv.loss(0.1, y) == pytest.approx(
        float(0.5 * ((act(x @ A.T) - 0.1) @ B.T - y).pow(2).sum(1).mean()), rel=1e-12
    )


def test_eq37_bounds_at_the_largest_size():
    # (d, m) = (20, 80), two outputs: P = 1600 + 160, G from the explicit Jacobian.
    x, _, A, B, act = setup(20, 80, 2, seed=4, n=32)
    curv = OneBlockCurvature(x, A, B, act)
    bounds = gauss_newton_bounds(x, A, B, torch.relu, 0.0)  # the existing, separate path
    assert bounds.lambda_a == pytest.approx(curv.lambda_a, rel=1e-10)
    assert bounds.lambda_b == pytest.approx(curv.lambda_b(0.0), rel=1e-10)
    for b in (0.0, curv.mean_activation):
        dense = dense_gn(A, B, act, b, x)
        torch.testing.assert_close(curv.gauss_newton(b), dense, rtol=1e-11, atol=1e-12)
        lam_g = top(dense)
        bounds = curv.bounds(b)
        assert bounds.lower - 1e-10 <= lam_g <= bounds.upper + 1e-10
        assert bounds.upper - bounds.lower > 1e-3 * lam_g  # not trivially tight


def test_eq37_is_tight_only_where_a_block_dominates():
    # With B scaled up, λ_A dominates; far from μ̄, λ_B(b) does: λ_G meets the lower bound.
    x, _, A, B, act = setup(5, 12, 3, seed=2)
    curv = OneBlockCurvature(x, A, 30 * B, act)
    far = curv.mean_activation + 200.0
    for b in (curv.mean_activation, far):
        lower = curv.bounds(b).lower
        assert (curv.lambda_g(b) - lower) / lower < 1e-2


def circulant_setup(m=6, base=20, seed=1):
    """A circulant A on a sample closed under cyclic shifts: every neuron has the same
    sample mean μ exactly (the assumption E[a] = μ1 of eq. 38)."""
    g = torch.Generator().manual_seed(seed)
    first = torch.rand(m, generator=g, dtype=F64) * 2 / m**0.5 - 1 / m**0.5
    A = torch.stack([first.roll(i) for i in range(m)])
    x0 = torch.randn(base, m, generator=g, dtype=F64)
    x = torch.cat([x0.roll(i, dims=1) for i in range(m)])
    B = (torch.rand(3, m, generator=g, dtype=F64) * 2 - 1) / m**0.5
    return x, A, B


def test_eq38_factor_two_at_the_common_mean():
    x, A, B = circulant_setup()
    curv = OneBlockCurvature(x, A, B, torch.relu)
    means = curv.acts.mean(0)
    assert float(means.max() - means.min()) < 1e-12
    assert mean_shift_gap_bound(curv.acts) < 1e-24
    mu = curv.mean_activation
    grid = torch.linspace(mu - 1.0, mu + 1.0, 41, dtype=F64).tolist()
    b_star, lam_star, values = minimise_convex(curv.lambda_g, grid, refine=30)
    brute = min(
        top(dense_gn(A, B, torch.relu, b, x))
        for b in torch.linspace(b_star - 0.01, b_star + 0.01, 41, dtype=F64).tolist()
    )
    assert lam_star <= brute + 1e-12
    lam_mu = top(dense_gn(A, B, torch.relu, mu, x))
    assert lam_star - 1e-12 <= lam_mu <= 2 * lam_star
    assert max(values) > 2 * lam_star  # the sweep reaches shifts where b matters


def test_eq38_with_unequal_means_needs_eq28_slack():
    # E[a] = μ̄1 + ε: the chain of eq. 41 through eq. 28 gives λ_G(μ̄) <= 2 λ_G(b*) + ‖ε‖².
    for seed in range(3):
        x, _, A, B, act = setup(3, 8, 2, seed=seed, n=80)
        curv = OneBlockCurvature(x, A, B, act)
        mu = curv.mean_activation
        grid = [mu + 0.1 * k for k in range(-10, 11)]
        _, lam_star, _ = minimise_convex(curv.lambda_g, grid, refine=20)
        eps_sq = mean_shift_gap_bound(curv.acts)
        assert eps_sq > 1e-4  # the means really differ
        assert lam_star - 1e-12 <= curv.lambda_g(mu) <= 2 * lam_star + eps_sq


@pytest.mark.parametrize("spread", [0.0, 0.5, 3.0])
def test_eq46_hessian_gn_gap_below_residual_bound(spread):
    x, y, A, B, act = setup(4, 7, 3, seed=5, spread=spread)
    curv = OneBlockCurvature(x, A, B, act)
    for b in (0.0, curv.mean_activation):
        h = dense_hessian(A, B, act, b, x, y)
        g = dense_gn(A, B, act, b, x)
        gap = float(torch.linalg.matrix_norm(h - g, ord=2))
        r_b = float(
            sum((y_i - (act(A @ x_i) - b) @ B.T).norm() * x_i.norm() for x_i, y_i in zip(x, y))
            / x.shape[0]
        )  # eq. 45 by its definition
        assert curv.residual_bound(b, y) == pytest.approx(r_b, rel=1e-12)
        assert abs(top(h) - top(g)) <= gap + 1e-12 <= r_b + 1e-12
        assert gap > 0.0


def test_eq46_zero_loss_means_hessian_equals_gn():
    x, _, A, B, act = setup(4, 6, 3, seed=6)
    b = 0.2
    with torch.no_grad():
        y = (act(x @ A.T) - b) @ B.T  # the student is its own teacher: L_b = 0
    curv = OneBlockCurvature(x, A, B, act)
    assert curv.loss(b, y) == 0.0 and curv.residual_bound(b, y) == 0.0
    torch.testing.assert_close(
        dense_hessian(A, B, act, b, x, y), curv.gauss_newton(b), rtol=1e-12, atol=1e-13
    )


def test_minimise_convex_finds_the_minimum_between_grid_points():
    fn = lambda b: (b - 0.317) ** 2 + abs(b - 0.317)  # noqa: E731 - convex, kink at the min
    b, value, values = minimise_convex(fn, [0.0, 0.25, 0.5, 0.75, 1.0], refine=40)
    assert b == pytest.approx(0.317, abs=1e-7) and value < min(values)
    b_edge, _, _ = minimise_convex(fn, [0.5, 0.75, 1.0], refine=40)
    assert b_edge == pytest.approx(0.5, abs=1e-6)  # at an end the bracket is the first cell


class JointDownProjections(nn.Module):
    """f = Σ_ℓ B_ℓ(a_ℓ − b_ℓ1) on fixed activations (eq. 47)."""

    def __init__(self, widths, d_out, shifts):
        super().__init__()
        self.downs = nn.ModuleList(nn.Linear(w, d_out, bias=False) for w in widths)
        self.shifts = shifts

    def forward(self, acts):
        return sum(lin(a - b) for lin, a, b in zip(self.downs, acts, self.shifts))


def layered_activations(widths=(3, 5), n=200, equal_means=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i, w in enumerate(widths):
        a = torch.relu(torch.randn(n, w, generator=g, dtype=F64) + 0.3 * i)
        if equal_means:  # every neuron of layer ℓ has the layer's mean μ_ℓ exactly
            a = a - a.mean(0) + a.mean()
        out.append(a)
    return out


def test_eq49_joint_hessian_is_the_dense_one():
    acts = layered_activations()
    shifts = [0.1, -0.4]
    torch.manual_seed(0)
    model = JointDownProjections([3, 5], 2, shifts).double()
    params = [p for p in model.parameters()]
    sizes = [p.numel() for p in params]
    y = torch.randn(200, 2, dtype=F64, generator=torch.Generator().manual_seed(1))

    def loss(theta):
        chunks = theta.split(sizes)
        out = sum(
            (a - b) @ c.reshape(p.shape).T for a, b, c, p in zip(acts, shifts, chunks, params)
        )
        return 0.5 * (out - y).pow(2).sum(1).mean()

    theta = torch.cat([p.detach().reshape(-1) for p in params])
    dense = torch.autograd.functional.hessian(loss, theta)
    torch.testing.assert_close(
        joint_down_projection_hessian(acts, shifts, 2), dense, rtol=1e-12, atol=1e-13
    )
    assert joint_down_projection_sharpness(acts, shifts) == pytest.approx(top(dense), rel=1e-12)


def test_eq49_decomposition_and_layer_means_minimise():
    acts = layered_activations()
    mus = [float(a.mean()) for a in acts]
    shifts = [0.0, 0.2]
    v = torch.cat(
        [torch.full((a.shape[1],), mu - b, dtype=F64) for a, mu, b in zip(acts, mus, shifts)]
    )
    torch.testing.assert_close(
        joint_second_moment(acts, shifts), stacked_covariance(acts) + torch.outer(v, v)
    )
    at_means = joint_down_projection_sharpness(acts, mus)
    assert at_means == pytest.approx(top(stacked_covariance(acts)), rel=1e-12)
    grid = torch.linspace(-0.5, 0.5, 21).tolist()
    others = [
        joint_down_projection_sharpness(acts, [mus[0] + s, mus[1] + t]) for s in grid for t in grid
    ]
    assert min(others) >= at_means - 1e-12
    assert max(others) > 1.5 * at_means


def test_eq49_unequal_means_within_stacked_eq28():
    acts = layered_activations(equal_means=False, seed=3)
    means = [float(a.mean()) for a in acts]
    eps_sq = sum(mean_shift_gap_bound(a) for a in acts)
    floor = top(stacked_covariance(acts))
    at_means = joint_down_projection_sharpness(acts, means)
    assert eps_sq > 1e-4
    assert floor - 1e-12 <= at_means <= floor + eps_sq
    assert not math.isclose(at_means, floor, rel_tol=1e-6)
