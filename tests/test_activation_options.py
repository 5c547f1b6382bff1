"""The options valid on every activation: topk, clip and adaptive."""

from __future__ import annotations

import math

import pytest
import torch

import actlab
from actlab.activations.sparse import kept_count


@pytest.mark.parametrize(("fraction", "n"), [(0.1, 1024), (0.3, 10), (0.5, 7), (1.0, 5),
                                             (0.01, 50), (0.25, 12)])
def test_topk_keeps_exactly_ceil_k_n(fraction: float, n: int) -> None:
    expected = math.ceil(round(fraction * n, 9))
    assert kept_count(fraction, n) == expected
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(6, n, generator=gen, dtype=torch.float64).requires_grad_(True)
    module = actlab.activation(f"sigmoid:topk={fraction}")  # outputs never exactly 0
    y = module(x)
    kept = y != 0
    assert kept.sum(dim=-1).tolist() == [expected] * 6
    # the kept entries are the largest ones
    s = torch.sigmoid(x.detach())
    threshold = s.topk(expected, dim=-1).values[:, -1:]
    assert torch.equal(kept, s >= threshold)
    # the gradient flows only through kept entries, with the activation's slope there
    y.sum().backward()
    assert torch.equal(x.grad != 0, kept)
    assert torch.allclose(x.grad[kept], (s * (1 - s))[kept])


def test_topk_exact_count_with_ties_and_conv_layout() -> None:
    x = torch.zeros(3, 20)  # all tied
    assert (actlab.activation("identity:shift=-1:topk=0.25")(x) != 0).sum(-1).tolist() == [5] * 3
    conv = torch.randn(2, 10, 4, 4)
    y = actlab.activation("sigmoid:topk=0.3")(conv)
    assert torch.equal((y != 0).sum(dim=1), torch.full((2, 4, 4), 3))  # channels, dim 1


def test_clip_clamps_and_zeroes_gradient_above() -> None:
    x = torch.linspace(-3, 3, 121, dtype=torch.float64, requires_grad=True)
    y = actlab.activation("relu2:clip=2")(x)
    assert float(y.detach().max()) == 2.0
    y.sum().backward()
    above = x.detach() ** 2 > 2
    positive_above = above & (x.detach() > 0)
    assert bool((x.grad[positive_above] == 0).all())
    below = (x.detach() > 0) & ~above
    assert torch.allclose(x.grad[below], 2 * x.detach()[below])


@pytest.mark.parametrize("shape", [(8, 32), (2, 5, 32), (4, 16, 3, 3)])
def test_adaptive_output_has_zero_feature_mean(shape: tuple[int, ...]) -> None:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=gen, dtype=torch.float64)
    module = actlab.activation("gelu:adaptive").double()
    y = module(x)
    dim = 1 if len(shape) == 4 else -1
    assert float(y.mean(dim=dim).abs().max()) < 1e-14
    plain = torch.nn.functional.gelu(x)
    assert float(plain.mean(dim=dim).abs().min()) > 1e-3  # centring did something
    assert torch.allclose(y, plain - plain.mean(dim=dim, keepdim=True))
    module.eval()
    assert float(module(x).mean(dim=dim).abs().max()) < 1e-14


def test_adaptive_gradient_is_centred() -> None:
    x = torch.randn(4, 16, dtype=torch.float64, requires_grad=True)
    g = torch.randn(4, 16, dtype=torch.float64)
    y = actlab.activation("identity:adaptive")(x)
    (grad,) = torch.autograd.grad(y, x, g)
    assert torch.allclose(grad, g - g.mean(-1, keepdim=True))


def test_adaptive_momentum_ema_and_freeze_after() -> None:
    module = actlab.activation("identity:adaptive:momentum=0.5:freeze_after=3")
    batches = [torch.full((2, 4), float(v)) for v in (1.0, 3.0, 5.0, 100.0)]
    expected_running = [1.0, 2.0, 3.5, 3.5]  # first copies, then EMA, then frozen
    for batch, running in zip(batches, expected_running):
        y = module(batch)
        assert float(module.center.running_mean) == pytest.approx(running)
        assert torch.allclose(y, batch - running)
    assert int(module.center.steps) == 3
    module.eval()
    assert torch.allclose(module(batches[0]), batches[0] - 3.5)


def test_adaptive_freeze_without_momentum_uses_default_momentum() -> None:
    # the default momentum of actlab.activations.running: min(1, 5 / freeze_after) = 0.5
    module = actlab.activation("identity:adaptive:freeze_after=10")
    means = [2.0, 5.0] + [1.0] * 8
    for mean in means:
        x = torch.tensor([[mean - 1.0, mean + 1.0]])
        assert torch.allclose(module(x), x - mean)  # per-example mean while counting
    expected = means[0]
    for mean in means[1:]:
        expected = 0.5 * expected + 0.5 * mean
    c = torch.tensor([[10.0, 20.0]])
    assert float(module.center.running_mean) == pytest.approx(expected)
    assert torch.allclose(module(c), c - expected)  # frozen at the EMA
    module.eval()
    assert torch.allclose(module(c), c - expected)


def test_eval_mode_does_not_update_state() -> None:
    module = actlab.activation("gelu:adaptive:momentum=0.1").eval()
    module(torch.randn(3, 5))
    assert int(module.center.steps) == 0


@pytest.mark.parametrize("spec", ["relu:shift=0.3", "gelu:adaptive", "silu:adaptive",
                                  "silu:shift=0.1", "leaky_relu:shift=0.1", "mish:adaptive", "gelu:tanh:shift=0.2", "sugar",
                                  "relu:adaptive:topk=0.5"])
def test_second_derivatives_work(spec: str) -> None:
    """Hessian-vector products need double backward through the custom autograd nodes."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2, 6, generator=gen, dtype=torch.float64)
    x = (x + 0.05 * torch.sign(x)).requires_grad_(True)
    module = actlab.activation(spec).double()
    assert torch.autograd.gradgradcheck(module, (x,))


@pytest.mark.parametrize("spec", ["relu:shift=0.3", "gelu:adaptive", "silu:adaptive",
                                  "silu:shift=0.3", "leaky_relu:slope=0.2:adaptive",
                                  "gelu:tanh:adaptive"])
def test_fused_path_equals_composition(spec: str) -> None:
    """The one-node fast path gives the same values and gradients as f, then the option."""
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(5, 12, generator=gen, dtype=torch.float64, requires_grad=True)
    g = torch.randn(5, 12, generator=gen, dtype=torch.float64)
    module = actlab.activation(spec).double()
    assert module._fused is not None
    base = actlab.activation(spec.split(":shift")[0].replace(":adaptive", "")).double()
    y = module(x)
    (grad,) = torch.autograd.grad(y, x, g)
    y_ref = base(x)
    if "adaptive" in spec:
        y_ref = y_ref - y_ref.mean(-1, keepdim=True)
    else:
        y_ref = y_ref - 0.3
    (grad_ref,) = torch.autograd.grad(y_ref, x, g)
    assert torch.allclose(y, y_ref, rtol=0, atol=1e-14)
    assert torch.allclose(grad, grad_ref, rtol=0, atol=1e-14)
