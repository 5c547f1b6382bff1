"""Props. B.1–B.2 of "Rethinking Activation Functions" checked against Hessians / Gauss–Newton matrices of real modules."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from actlab.curvature import GaussNewtonOperator, HessianOperator, top_eigenvalues
from actlab.theory.curvature import (
    down_projection_hessian,
    down_projection_sharpness,
    gauss_newton_bounds,
    mean_shift_gap_bound,
    optimal_scalar_shift,
)


def half_sq(out, y):
    """½E‖f − y‖², the loss of eqs. 22 and 32."""
    return 0.5 * ((out - y) ** 2).sum(-1).mean()


class DownProjection(nn.Module):
    """f(a) = B(a − b1) on fixed activations (eq. 21)."""

    def __init__(self, m, d_out, b):
        super().__init__()
        self.B = nn.Linear(m, d_out, bias=False)
        self.b = b

    def forward(self, a):
        return self.B(a - self.b)


class OneBlock(nn.Module):
    """f(x) = B(φ(Ax) − b1) (eq. 29)."""

    def __init__(self, d_in, m, d_out, b, act=torch.relu):
        super().__init__()
        self.A = nn.Linear(d_in, m, bias=False)
        self.B = nn.Linear(m, d_out, bias=False)
        self.b = b
        self.act = act

    def forward(self, x):
        return self.B(self.act(self.A(x)) - self.b)


def equal_mean_activations(n=400, m=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    c = torch.relu(torch.randn(n, m, generator=g, dtype=torch.float64) / 3**0.5)
    mu = float(c.mean())
    return c - c.mean(0) + mu, mu  # every neuron's empirical mean is exactly μ


def test_down_projection_hessian_is_kronecker():
    acts, _ = equal_mean_activations(n=50, m=4)
    y = torch.randn(50, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    for b in (0.0, 0.7):
        torch.manual_seed(0)
        model = DownProjection(4, 3, b).double()
        dense = HessianOperator(model, half_sq, [(acts, y)]).to_dense()
        torch.testing.assert_close(dense, down_projection_hessian(acts, b, 3), rtol=1e-12, atol=1e-12)


def test_prop_b1_minimiser_is_the_mean():
    acts, mu = equal_mean_activations()
    sweep = torch.linspace(mu - 0.3, mu + 0.3, 61, dtype=torch.float64).tolist()
    sharp = torch.tensor([down_projection_sharpness(acts, b) for b in sweep])
    best = sweep[int(sharp.argmin())]
    assert abs(best - mu) <= 0.3 / 60 + 1e-12  # the grid point nearest μ
    at_mu = down_projection_sharpness(acts, mu)
    assert (sharp >= at_mu - 1e-12).all()
    assert optimal_scalar_shift(acts) == pytest.approx(mu, abs=1e-6)
    # The sharpness of the actual module (Lanczos on its Hessian) is λmax(M_b).
    y = torch.zeros(acts.shape[0], 2, dtype=torch.float64)
    for b in (0.0, mu):
        torch.manual_seed(0)
        op = HessianOperator(DownProjection(acts.shape[1], 2, b).double(), half_sq, [(acts, y)])
        vals, _, _ = top_eigenvalues(op, k=1, tol=1e-10, generator=torch.Generator().manual_seed(0))
        assert float(vals[0]) == pytest.approx(down_projection_sharpness(acts, b), rel=1e-8)
    assert down_projection_sharpness(acts, 0.0) > 1.5 * at_mu  # the shift matters here


def test_prop_b1_unequal_means_gap_bound():
    g = torch.Generator().manual_seed(2)
    acts = torch.relu(torch.randn(300, 5, generator=g, dtype=torch.float64) + torch.linspace(-0.5, 0.5, 5))
    mu_bar = float(acts.mean())
    gap = down_projection_sharpness(acts, mu_bar) - down_projection_sharpness(acts, optimal_scalar_shift(acts))
    assert -1e-10 <= gap <= mean_shift_gap_bound(acts)


def dense_gauss_newton(model, x):
    """E[JᵀJ] from the full output Jacobian (jacrev), for ½E‖f − y‖²; blocks ordered A then B."""
    params = {n: p.detach() for n, p in model.named_parameters()}
    jac = torch.func.jacrev(lambda p: torch.func.functional_call(model, p, (x,)))(params)
    j = torch.cat([jac[n].reshape(x.shape[0], -1, params[n].numel()) for n in params], dim=2)
    return torch.einsum("nop,noq->pq", j, j) / x.shape[0], params["A.weight"].numel()


def one_block_setup(seed, d_in=4, m=6, d_out=3):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(64, d_in, generator=g, dtype=torch.float64)
    y = torch.randn(64, d_out, generator=g, dtype=torch.float64)
    torch.manual_seed(seed + 1)
    base = OneBlock(d_in, m, d_out, 0.0).double()
    with torch.no_grad():
        mu_bar = float(torch.relu(base.A(x)).mean())

    def at(b):
        model = OneBlock(d_in, m, d_out, b).double()
        model.load_state_dict(base.state_dict())
        return model

    return x, y, mu_bar, at


def test_prop_b2_bounds_hold_on_one_block_model():
    x, y, mu_bar, at = one_block_setup(0)
    gaps = []
    for b in (-0.5, 0.0, 0.5 * mu_bar, mu_bar, 1.0, 2.0):
        model = at(b)
        g, n_a = dense_gauss_newton(model, x)
        lam_g = float(torch.linalg.eigvalsh(g)[-1])
        bounds = gauss_newton_bounds(x, model.A.weight.detach(), model.B.weight.detach(), torch.relu, b)
        assert bounds.lower - 1e-9 <= lam_g <= bounds.upper + 1e-9, (b, bounds, lam_g)
        gaps.append(bounds.upper - bounds.lower)
        # λ_A and λ_B(b) are the top eigenvalues of the diagonal blocks of the same GN matrix.
        assert float(torch.linalg.eigvalsh(g[:n_a, :n_a])[-1]) == pytest.approx(bounds.lambda_a, rel=1e-10)
        assert float(torch.linalg.eigvalsh(g[n_a:, n_a:])[-1]) == pytest.approx(bounds.lambda_b, rel=1e-10)
    assert min(gaps) > 0  # the bounds are not trivially tight
    # The operator path (Lanczos on GN-vector products, per-block filter) agrees.
    model = at(mu_bar)
    bounds = gauss_newton_bounds(x, model.A.weight.detach(), model.B.weight.detach(), torch.relu, mu_bar)
    block = GaussNewtonOperator(model, half_sq, [(x, y)], params=["A.weight"])
    top = float(top_eigenvalues(block, tol=1e-10, generator=torch.Generator().manual_seed(0))[0][0])
    assert top == pytest.approx(bounds.lambda_a, rel=1e-8)
    full = GaussNewtonOperator(model, half_sq, [(x, y)])
    top = float(top_eigenvalues(full, tol=1e-10, generator=torch.Generator().manual_seed(0))[0][0])
    assert top == pytest.approx(float(torch.linalg.eigvalsh(dense_gauss_newton(model, x)[0])[-1]), rel=1e-8)


def test_prop_b2_factor_two_at_mean_shift():
    x, _, mu_bar, at = one_block_setup(3, m=5, d_out=2)
    lam = {}
    for b in torch.linspace(-0.5, 1.5, 41).tolist() + [mu_bar]:
        lam[b] = float(torch.linalg.eigvalsh(dense_gauss_newton(at(b), x)[0])[-1])
    best = min(lam.values())
    assert best <= lam[mu_bar] <= 2 * best
    assert lam[-0.5] > 1.2 * best  # the sweep is wide enough to matter
