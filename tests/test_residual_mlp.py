"""ResidualMLP (eq. 2): forward against a hand-written reference, init, statistics, gradients."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from actlab.activations.spec import SpecActivation, make_activation
from actlab.nn.residual_mlp import ResidualMLP

pytestmark = pytest.mark.usefixtures("one_thread")


def _reference(model: ResidualMLP, x: torch.Tensor, phi) -> tuple[torch.Tensor, list, list]:
    hidden, post = [], []
    for block in model.blocks:
        ln = (block.norm.weight, block.norm.bias)
        up = (block.up.weight, block.up.bias)
        down = (block.down.weight, block.down.bias)
        if model.norm == "pre":
            a = phi(F.linear(F.layer_norm(x, (model.d,), *ln), *up))
            x = x + F.linear(a, *down)
        else:
            a = phi(F.linear(x, *up))
            x = F.layer_norm(x + F.linear(a, *down), (model.d,), *ln)
        hidden.append(x.mean())
        post.append(a.mean())
    return x, hidden, post


@pytest.mark.parametrize("norm,bias", [("pre", False), ("post", True)])
def test_forward_and_stats_match_reference(norm, bias):
    g = torch.Generator().manual_seed(0)
    model = ResidualMLP(5, 11, 3, "relu:shift=0.3", norm=norm, bias=bias, generator=g).double()
    with torch.no_grad():  # non-trivial LayerNorm affine parameters
        for block in model.blocks:
            block.norm.weight.uniform_(0.5, 1.5, generator=g)
            block.norm.bias.uniform_(-0.5, 0.5, generator=g)
    x = torch.randn(7, 5, generator=g, dtype=torch.float64)
    out, stats = model(x, return_stats=True)
    ref, hidden, post = _reference(model, x, lambda z: torch.relu(z) - 0.3)
    assert torch.allclose(out, ref, rtol=1e-12, atol=1e-12)
    assert torch.allclose(stats["hidden_mean"], torch.stack(hidden), atol=1e-12)
    assert torch.allclose(stats["post_act_mean"], torch.stack(post), atol=1e-12)
    assert torch.equal(model(x), out)


def test_gradients_by_gradcheck():
    model = ResidualMLP(3, 4, 2, "gelu:shift=theory", bias=True,
                        generator=torch.Generator().manual_seed(1)).double()
    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    params = tuple(model.parameters())

    def f(x, *ps):
        named = dict(zip((n for n, _ in model.named_parameters()), ps))
        return torch.func.functional_call(model, named, (x,))

    assert torch.autograd.gradcheck(f, (x, *params), fast_mode=True)


def test_uniform_init_bounds_and_variance():
    model = ResidualMLP(64, 256, 2, "relu", bias=True, generator=torch.Generator().manual_seed(0))
    for block in model.blocks:
        for linear in (block.up, block.down):
            bound = 1 / math.sqrt(linear.in_features)
            for t in (linear.weight, linear.bias):
                assert t.abs().max() <= bound
            # U[-b, b] has variance b^2/3; 16k samples pin it to a few percent
            assert abs(linear.weight.var().item() / (bound**2 / 3) - 1) < 0.05
        assert torch.equal(block.norm.weight, torch.ones(64))  # LN keeps its affine params
        assert block.norm.weight.requires_grad


def test_generator_makes_init_deterministic_and_seed_dependent():
    a = ResidualMLP(4, 8, 2, generator=torch.Generator().manual_seed(5))
    b = ResidualMLP(4, 8, 2, generator=torch.Generator().manual_seed(5))
    c = ResidualMLP(4, 8, 2, generator=torch.Generator().manual_seed(6))
    va, vb, vc = (torch.nn.utils.parameters_to_vector(m.parameters()) for m in (a, b, c))
    assert torch.equal(va, vb) and not torch.equal(va, vc)


def test_with_activation_copies_parameters_only_activation_differs():
    model = ResidualMLP(4, 8, 2, "relu", generator=torch.Generator().manual_seed(0))
    twin = model.with_activation("relu:shift=theory")
    assert torch.equal(torch.nn.utils.parameters_to_vector(model.parameters()),
                       torch.nn.utils.parameters_to_vector(twin.parameters()))
    assert twin.blocks[0].up.weight is not model.blocks[0].up.weight
    assert "shift" not in repr(model.blocks[0].act)  # the original is untouched
    x = torch.randn(3, 4)
    assert not torch.allclose(model(x), twin(x))


def test_shifted_activation_matches_registry_and_supports_functorch():
    import actlab

    z = torch.randn(50, dtype=torch.float64)
    for spec in ("relu:shift=theory", "silu:shift=0.077"):
        ours = make_activation(spec).double()
        assert isinstance(ours, SpecActivation)  # the registry's module: the shift is its state
        assert torch.allclose(ours(z), actlab.activation(spec).double()(z), rtol=0, atol=1e-12)
        # the ensemble and curvature tools need vmap and grad through it
        g = torch.func.vmap(torch.func.grad(lambda t, m=ours: m(t).sum()))(z.view(5, 10))
        assert g.shape == (5, 10)
    relu = make_activation("relu:shift=theory")
    assert abs(float(relu.shift) - 1 / math.sqrt(6 * math.pi)) < 1e-6  # Table 1: 0.230


def test_bad_arguments_raise_value_errors():
    with pytest.raises(ValueError, match="norm"):
        ResidualMLP(4, 8, 2, norm="middle")
    with pytest.raises(ValueError, match="m: must be a positive integer"):
        ResidualMLP(4, 0, 2)
    with pytest.raises(ValueError, match="relu"):
        ResidualMLP(4, 8, 2, activation="reluu")


def test_every_model_deep_copies_a_module_passed_in_once_per_site():
    """One rule for a module passed as the activation: a fresh copy at every site."""
    from actlab.nn.ffn import FFN, GatedFFN
    from actlab.nn.mlp import MLP

    template = make_activation("silu:learnable")
    models = {"residual": ResidualMLP(4, 8, 3, activation=template),
              "mlp": MLP(2, 3, hidden=4, depth=2, activation=template),
              "ffn": FFN(4, 8, activation=template), "gated": GatedFFN(4, 8, gate=template)}
    sites = {name: [m for m in model.modules() if isinstance(m, SpecActivation)]
             for name, model in models.items()}
    assert [len(s) for s in sites.values()] == [3, 3, 1, 1]
    every = [m for s in sites.values() for m in s]
    assert len({id(m) for m in every}) == len(every) and template not in every
    beta = [p for m in every for p in m.parameters()]
    assert len({id(p) for p in beta}) == len(beta) == len(every)  # no shared learnable beta
    assert all(m.spec == "silu:learnable" for m in every)
    made = make_activation(lambda: torch.nn.Tanh())  # a factory: its result
    assert isinstance(made, torch.nn.Tanh)
    with pytest.raises(TypeError, match="factory"):
        make_activation(lambda: 3)
    with pytest.raises(ValueError, match="expected a spec string"):
        make_activation(3)
