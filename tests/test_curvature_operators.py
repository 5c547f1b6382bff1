"""Hessian and Gauss–Newton operators against dense autograd references (float64)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from actlab.curvature import GaussNewtonOperator, HessianOperator, select_parameters


def tiny_mlp(d_in=3, hidden=5, d_out=2, seed=0, norm=False) -> nn.Module:
    torch.manual_seed(seed)
    layers = [nn.Linear(d_in, hidden), nn.Tanh(), nn.Linear(hidden, d_out)]
    if norm:
        layers.insert(0, nn.LayerNorm(d_in))
    return nn.Sequential(*layers).double()


def make_batches(d_in=3, d_out=2, sizes=(7, 4), seed=1, classes=None):
    g = torch.Generator().manual_seed(seed)
    out = []
    for n in sizes:
        x = torch.randn(n, d_in, generator=g, dtype=torch.float64)
        if classes:
            y = torch.randint(0, classes, (n,), generator=g)
        else:
            y = torch.randn(n, d_out, generator=g, dtype=torch.float64)
        out.append((x, y))
    return out


def flat_fn(model, names):
    """Loss as a function of one flat vector over the named parameters (dense reference)."""
    params = dict(model.named_parameters())
    shapes = [params[n].shape for n in names]
    numels = [params[n].numel() for n in names]
    others = {n: p.detach() for n, p in params.items() if n not in names}

    def call(flat, x):
        chunks = torch.split(flat, numels)
        p = {n: c.view(s) for n, c, s in zip(names, chunks, shapes)}
        return functional_call(model, (p, others), (x,))

    theta = torch.cat([params[n].detach().reshape(-1) for n in names])
    return call, theta


def dense_hessian(model, loss_fn, batches, names):
    call, theta = flat_fn(model, names)
    total = sum(b[1].shape[0] for b in batches)
    h = torch.zeros(theta.numel(), theta.numel(), dtype=torch.float64)
    for x, y in batches:
        h += x.shape[0] / total * torch.autograd.functional.hessian(lambda t, x=x, y=y: loss_fn(call(t, x), y), theta)
    return h


def dense_gauss_newton(model, loss_fn, batches, names):
    call, theta = flat_fn(model, names)
    total = sum(b[1].shape[0] for b in batches)
    g = torch.zeros(theta.numel(), theta.numel(), dtype=torch.float64)
    for x, y in batches:
        out = call(theta, x)
        jac = torch.autograd.functional.jacobian(lambda t, x=x: call(t, x).reshape(-1), theta)
        h_out = torch.autograd.functional.hessian(
            lambda o, out=out, y=y: loss_fn(o.view_as(out), y), out.detach().reshape(-1)
        )
        g += x.shape[0] / total * jac.T @ h_out @ jac
    return g


def test_hessian_matches_dense_autograd():
    model = tiny_mlp(norm=True)
    batches = make_batches()
    names = [n for n, _ in model.named_parameters()]
    ref = dense_hessian(model, F.mse_loss, batches, names)
    for cache_graph in (False, True):
        op = HessianOperator(model, "mse", batches, cache_graph=cache_graph)
        assert op.dim == ref.shape[0]
        torch.testing.assert_close(op.to_dense(), ref, rtol=1e-10, atol=1e-12)


def test_parameter_selection_by_names_and_filter():
    model = tiny_mlp()
    batches = make_batches()
    names = ["2.weight", "0.bias"]
    op_names = HessianOperator(model, "mse", batches, params=names)
    # Selection keeps named_parameters order whatever the order asked for.
    assert op_names.param_names == ["0.bias", "2.weight"]
    ref = dense_hessian(model, F.mse_loss, batches, ["0.bias", "2.weight"])
    torch.testing.assert_close(op_names.to_dense(), ref, rtol=1e-10, atol=1e-12)
    op_filter = HessianOperator(model, "mse", batches, params=lambda n, p: n.startswith("2."))
    assert op_filter.param_names == ["2.weight", "2.bias"]
    assert op_filter.dim == 5 * 2 + 2


def test_unknown_parameter_name_suggests_closest():
    model = tiny_mlp()
    with pytest.raises(ValueError, match="2.weight"):
        select_parameters(model, ["2.weigth"])
    with pytest.raises(ValueError, match="cross_entropy"):
        HessianOperator(model, "cross_entropi", make_batches())


@pytest.mark.parametrize("kind", ["mse", "cross_entropy"])
def test_gauss_newton_matches_dense_jt_h_j(kind):
    model = tiny_mlp(d_out=3)
    batches = make_batches(d_out=3, classes=3 if kind == "cross_entropy" else None)
    loss_fn = F.mse_loss if kind == "mse" else F.cross_entropy
    op = GaussNewtonOperator(model, kind, batches)
    names = [n for n, _ in model.named_parameters()]
    ref = dense_gauss_newton(model, loss_fn, batches, names)
    dense = op.to_dense()
    torch.testing.assert_close(dense, ref, rtol=1e-10, atol=1e-12)
    # GN is PSD while the Hessian at a random point is not, so the two must differ here.
    assert torch.linalg.eigvalsh(dense)[0] > -1e-10
    v = torch.randn(op.dim, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    assert not torch.allclose(dense @ v, HessianOperator(model, kind, batches).matvec(v), atol=1e-6)


def test_mse_gauss_newton_is_scaled_jtj():
    model = tiny_mlp()
    batches = make_batches(sizes=(6,))
    x, _ = batches[0]
    call, theta = flat_fn(model, [n for n, _ in model.named_parameters()])
    jac = torch.autograd.functional.jacobian(lambda t: call(t, x).reshape(-1), theta)
    n_out = call(theta, x).numel()
    op = GaussNewtonOperator(model, "mse", batches)
    torch.testing.assert_close(op.to_dense(), 2.0 / n_out * jac.T @ jac, rtol=1e-10, atol=1e-12)


def test_hessian_equals_gauss_newton_at_zero_loss():
    model = tiny_mlp()
    x = torch.randn(9, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        y = model(x)  # a perfect fit: residuals vanish
    h = HessianOperator(model, "mse", [(x, y)]).to_dense()
    g = GaussNewtonOperator(model, "mse", [(x, y)]).to_dense()
    torch.testing.assert_close(h, g, rtol=1e-10, atol=1e-13)
    # ... while away from zero loss they differ.
    h2 = HessianOperator(model, "mse", [(x, y + 1.0)]).to_dense()
    assert (h2 - g).abs().max() > 1e-4


def test_operators_never_touch_the_model():
    model = tiny_mlp(norm=True)
    model.train()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    batches = make_batches()
    v = torch.randn(sum(p.numel() for p in model.parameters()), dtype=torch.float64)
    for cls in (HessianOperator, GaussNewtonOperator):
        op = cls(model, "mse", batches)
        op.matvec(v)
        assert op.n_matvecs == 1
    assert model.training
    for n, p in model.named_parameters():
        assert torch.equal(p, before[n])
        assert p.grad is None
    model.eval()
    HessianOperator(model, "mse", batches).matvec(v)
    assert not model.training


def test_matvec_rejects_wrong_size():
    op = HessianOperator(tiny_mlp(), "mse", make_batches())
    with pytest.raises(ValueError, match="flat vector"):
        op.matvec(torch.zeros(op.dim + 1, dtype=torch.float64))
