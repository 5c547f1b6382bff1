"""Every spec runs under torch.func transforms (vmap, grad, forward-over-reverse HVPs)
and gives the same values and gradients as the eager fast paths."""

from __future__ import annotations

import pytest
import torch
from torch.func import grad, jvp, vmap

import actlab

SPECS = [
    "relu", "relu:shift=theory", "gelu:shift=0.115", "silu:shift=0.077", "leaky_relu:shift=0.2",
    "gelu:adaptive", "relu:adaptive", "sigmoid:shift=theory", "relu2:clip=15",
    "gelu:topk=0.5", "tanh", "elu:shift=0.1",
]


def _x(seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(5, 4, 16, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("spec", SPECS)
def test_vmap_matches_eager(spec: str) -> None:
    act = actlab.activation(spec)
    x = _x()
    eager = torch.stack([act(xi) for xi in x])
    mapped = vmap(act)(x)
    torch.testing.assert_close(mapped, eager, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("spec", SPECS)
def test_func_grad_matches_autograd(spec: str) -> None:
    act = actlab.activation(spec)
    x = _x(1)
    weights = torch.linspace(-1, 1, x.numel(), dtype=torch.float64).reshape(x.shape)
    leaf = x.clone().requires_grad_(True)
    (act(leaf) * weights).sum().backward()
    functional = grad(lambda t: (act(t) * weights).sum())(x)
    torch.testing.assert_close(functional, leaf.grad, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("spec", ["relu:shift=theory", "gelu:shift=0.115", "silu:adaptive"])
def test_forward_over_reverse_hvp_matches_double_backward(spec: str) -> None:
    act = actlab.activation(spec)
    x, v = _x(2), _x(3)
    weights = torch.cos(torch.arange(x.numel(), dtype=torch.float64)).reshape(x.shape)

    def loss(t: torch.Tensor) -> torch.Tensor:
        return (act(t) ** 2 * weights).sum()

    _, hvp = jvp(grad(loss), (x,), (v,))
    leaf = x.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(loss(leaf), leaf, create_graph=True)
    (expected,) = torch.autograd.grad((g * v).sum(), leaf)
    torch.testing.assert_close(hvp, expected, rtol=1e-10, atol=1e-12)


def test_sugar_surrogate_under_vmap_and_grad() -> None:
    act = actlab.activation("sugar")
    x = _x(4)
    leaf = x.clone().requires_grad_(True)
    act(leaf).sum().backward()
    functional = vmap(grad(lambda t: act(t).sum()))(x)
    torch.testing.assert_close(functional, leaf.grad, rtol=1e-12, atol=1e-12)
    assert (functional[x < 0] != 0).all()  # the surrogate, not ReLU's zero slope
