"""The optimizer factory: every name gives the same update in torch.optim and functional form."""

from __future__ import annotations

import pytest
import torch

from actlab.errors import ConfigError
from actlab.train.optim import OPTIMIZERS, make_functional_optimizer, make_optimizer


@pytest.mark.parametrize("name", OPTIMIZERS)
@pytest.mark.parametrize("weight_decay", [0.0, 0.05])
def test_torch_and_functional_optimizers_give_equal_updates(name, weight_decay):
    g = torch.Generator().manual_seed(1)
    start = [torch.randn(3, 4, generator=g, dtype=torch.float64),
             torch.randn(4, generator=g, dtype=torch.float64)]
    ref = [p.clone().requires_grad_(True) for p in start]
    fun = [p.clone() for p in start]
    opt = make_optimizer(name, ref, 0.05, momentum=0.8, weight_decay=weight_decay)
    fopt = make_functional_optimizer(name, 0.05, momentum=0.8, weight_decay=weight_decay)
    for _ in range(12):
        grads = [torch.randn(p.shape, generator=g, dtype=torch.float64) for p in start]
        for p, grad in zip(ref, grads):
            p.grad = grad.clone()
        opt.step()
        fopt.step(fun, [grad.clone() for grad in grads])
    for a, b in zip(fun, ref):
        torch.testing.assert_close(a, b.detach(), rtol=1e-12, atol=1e-12)
    assert not torch.equal(fun[0], start[0])  # the updates did something


def test_factory_names_select_the_right_torch_class():
    p = [torch.zeros(2, requires_grad=True)]
    assert type(make_optimizer("adamw", p, 1e-3)) is torch.optim.AdamW
    assert make_optimizer("nesterov", p, 1e-3).defaults["nesterov"] is True
    assert make_optimizer("sgd", p, 1e-3).defaults["momentum"] == 0


def test_unknown_optimizer_names_the_field_and_suggests():
    with pytest.raises(ConfigError, match="optimizer: .*adam"):
        make_optimizer("adm", [torch.zeros(1, requires_grad=True)], 1e-3)
    with pytest.raises(ConfigError, match="optimizer"):
        make_functional_optimizer("rmsprop", 1e-3)
