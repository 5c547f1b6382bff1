"""Device bugs caught without a GPU: models, ensembles and optimizers run on the ``meta`` device.

A tensor created on the CPU inside a computation whose inputs live elsewhere is the classic
device bug (``Expected all tensors to be on the same device``). Mixing ``meta`` and ``cpu``
tensors raises that same error, so running a step with every input and parameter on ``meta``
finds such a bug on any machine. Two gaps of the harness are checked separately: ``meta``
accepts 0-dim CPU tensors (Python-scalar-like) and CPU generators silently.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import actlab
from actlab.nn.gpt import GPT, GPTConfig
from actlab.nn.residual_mlp import ResidualMLP
from actlab.train.ensemble import Ensemble, EnsembleTrainer
from actlab.train.optim import OPTIMIZERS, make_functional_optimizer, make_optimizer
from actlab.train.placement import on_device

META = torch.device("meta")


def _residual_models(n: int) -> list[ResidualMLP]:
    return [ResidualMLP(6, 12, 2, activation="relu", generator=torch.Generator().manual_seed(s))
            for s in range(n)]


@pytest.mark.parametrize("spec", ["relu", "relu:shift=theory", "gelu:shift=0.1", "silu",
                                  "gelu:adaptive", "relu2:clip=50", "gelu:topk=0.25"])
def test_activation_forward_backward_on_meta(spec):
    act = actlab.activation(spec).to(META)
    x = torch.empty(8, 16, device=META, requires_grad=True)
    act(x).sum().backward()
    assert x.grad is not None and x.grad.device == META


def test_shifted_residual_mlp_trains_one_step_on_meta():
    model = ResidualMLP(6, 12, 2, activation="relu:shift=theory",
                        generator=torch.Generator().manual_seed(0)).to(META)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.empty(5, 6, device=META), torch.empty(5, 6, device=META)
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    assert all(p.device == META for p in model.parameters())
    assert all(b.device == META for b in model.buffers())


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_optimizer_factory_steps_on_meta(name):
    model = nn.Linear(4, 3).to(META)
    opt = make_optimizer(name, model.parameters(), lr=0.1)
    model(torch.empty(2, 4, device=META)).sum().backward()
    opt.step()
    state = [t for s in opt.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
    assert all(t.device == META or t.dim() == 0 for t in state)


def test_ensemble_step_with_shifted_members_on_meta():
    unshifted = [m.to(META) for m in _residual_models(2)]
    # the shifted copies are made from models already on meta: their shift must follow
    shifted = [m.with_activation("relu:shift=theory") for m in unshifted]
    with on_device(META):  # the ensemble lives on the unit's device
        ensemble = Ensemble({"unshifted": unshifted, "shifted": shifted})
    trainer = EnsembleTrainer(ensemble, nn.functional.mse_loss,
                              make_functional_optimizer("adam", lr=1e-3), keep_freed_memory=False)
    assert trainer.diverged.device == META  # the trainer's own state follows the members
    # The whole step on meta: off the CPU it reads no flag back to the host (the freezing
    # of diverged members runs as masks), so meta can run it.
    x, y = torch.empty(2, 4, 6, device=META), torch.empty(2, 4, 6, device=META)
    out = trainer.step(x, y, return_grads=True)
    leaves = [p for c in ensemble.conditions for p in ensemble.params[c].values()]
    assert all(p.device == META for p in leaves)
    assert all(t.device == META for t in out.losses.values())
    assert all(g.device == META for c in out.grads.values() for g in c.values())
    assert all(b.device == META for c in ensemble.conditions for b in ensemble.buffers[c].values())


def test_masked_freezing_equals_the_host_checked_path_on_cpu():
    # The accelerator path (always freeze, by masks) against the CPU path (freeze only once a
    # member has diverged): same parameters, including after a member diverges.
    def run(always: bool) -> list[torch.Tensor]:
        ensemble = Ensemble(_residual_models(3))
        trainer = EnsembleTrainer(ensemble, nn.functional.mse_loss,
                                  make_functional_optimizer("adam", lr=1e-2),
                                  keep_freed_memory=False)
        trainer._host_checks = not always
        g = torch.Generator().manual_seed(1)
        for step in range(4):
            x = torch.randn(3, 4, 6, generator=g)
            if step == 2:
                x[1] = float("nan")  # member 1 diverges here and must stay frozen
            trainer.step(x, torch.randn(3, 4, 6, generator=g))
        assert trainer.diverged.tolist() == [[False, True, False]]
        return [p.detach().clone() for p in trainer.ensemble.parameters()]

    for a, b in zip(run(False), run(True)):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_ensemble_follows_the_units_device_and_an_explicit_one():
    models = _residual_models(2)
    assert Ensemble(models).device.type == "cpu"
    with on_device(META):
        assert Ensemble(models).device == META
        assert Ensemble(models, device="cpu").device.type == "cpu"
    assert all(p.device.type == "cpu" for m in models for p in m.parameters())  # not moved


def test_gpt_forward_backward_on_meta():
    model = GPT(GPTConfig(vocab_size=32, block_size=8, n_layer=1, n_head=2, n_embd=16), seed=0)
    model = model.to(META)
    idx = torch.zeros(2, 8, dtype=torch.long, device=META)
    _, loss = model(idx, idx)
    loss.backward()
    assert loss.device == META


class _PlantedBug(nn.Module):
    """Adds a bias built on the CPU, whatever the input's device: the bug the harness must catch."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) + torch.ones(4)  # a 1-dim CPU tensor


def test_the_harness_catches_a_cpu_tensor_created_inside_a_step():
    model = _PlantedBug()
    model(torch.randn(2, 4)).sum().backward()  # fine on the CPU
    model = model.to(META)
    with pytest.raises((RuntimeError, NotImplementedError), match="device"):
        model(torch.empty(2, 4, device=META)).sum().backward()


def test_zero_dim_cpu_tensors_and_cpu_generators_pass_meta_silently():
    """Why generators need their own check: meta does not flag these two mixes."""
    x = torch.empty(3, device=META)
    assert (x + torch.tensor(1.0)).device == META  # 0-dim CPU tensor: accepted
    g = torch.Generator()  # a CPU generator: its device is what a unit must check
    assert g.device.type == "cpu"
