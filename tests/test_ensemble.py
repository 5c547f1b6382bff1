"""The vmapped ensemble against a Python loop of ordinary models and torch.optim optimizers."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from actlab.nn.residual_mlp import ResidualMLP
from actlab.train.ensemble import Ensemble, EnsembleTrainer, count_step_flops
from actlab.train.functional_optim import FunctionalAdam, FunctionalSGD
from actlab.train.optim import make_functional_optimizer

SEEDS = 3


pytestmark = pytest.mark.usefixtures("one_thread")


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).detach().norm() / b.detach().norm())


def _paired_models(dtype: torch.dtype, norm: str = "pre", bias: bool = False):
    base = [
        ResidualMLP(6, 12, 3, "relu", norm=norm, bias=bias,
                    generator=torch.Generator().manual_seed(s)).to(dtype)
        for s in range(SEEDS)
    ]
    return {"plain": base, "shifted": [m.with_activation("relu:shift=0.2") for m in base]}


def _batches(steps: int, dtype: torch.dtype):
    g = torch.Generator().manual_seed(123)
    return [
        (torch.randn(SEEDS, 16, 6, generator=g, dtype=dtype),
         torch.randn(SEEDS, 16, 6, generator=g, dtype=dtype))
        for _ in range(steps)
    ]


def _train_loop(models, batches, make_opt):
    """Reference: every model alone with a torch.optim optimizer."""
    models = {c: [copy.deepcopy(m) for m in group] for c, group in models.items()}
    opts = {c: [make_opt(m.parameters()) for m in group] for c, group in models.items()}
    losses = {c: [] for c in models}
    for x, y in batches:
        for c, group in models.items():
            row = []
            for s, model in enumerate(group):
                opts[c][s].zero_grad()
                loss = F.mse_loss(model(x[s]), y[s])
                loss.backward()
                opts[c][s].step()
                row.append(loss.detach())
            losses[c].append(torch.stack(row))
    return models, losses


def _train_ensemble(models, batches, optimizer):
    ens = Ensemble(models)
    trainer = EnsembleTrainer(ens, F.mse_loss, optimizer)
    losses = {c: [] for c in models}
    for x, y in batches:
        out = trainer.step(x, y)
        for c in models:
            losses[c].append(out.losses[c])
    return ens, losses


def _compare(models, ens, loop_models, loop_losses, ens_losses, tol):
    for c, group in models.items():
        for s in range(SEEDS):
            ref = torch.nn.utils.parameters_to_vector(loop_models[c][s].parameters())
            got = ens.flat_params(c)[s]
            assert _relative(got, ref) < tol, (c, s, _relative(got, ref))
            # training moved the parameters far more than the tolerance
            start = torch.nn.utils.parameters_to_vector(group[s].parameters()).detach()
            assert _relative(ref, start) > 1e3 * tol
        assert _relative(torch.stack(ens_losses[c]), torch.stack(loop_losses[c])) < tol


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 1e-6)])
def test_adam_ensemble_equals_loop(dtype, tol):
    models = _paired_models(dtype)
    batches = _batches(25, dtype)
    loop_models, loop_losses = _train_loop(
        models, batches, lambda p: torch.optim.Adam(p, lr=3e-3, weight_decay=1e-3)
    )
    ens, ens_losses = _train_ensemble(models, batches, FunctionalAdam(lr=3e-3, weight_decay=1e-3))
    _compare(models, ens, loop_models, loop_losses, ens_losses, tol)


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 1e-6)])
def test_sgd_nesterov_post_norm_with_bias_equals_loop(dtype, tol):
    models = _paired_models(dtype, norm="post", bias=True)
    batches = _batches(25, dtype)
    hyper = dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3)
    loop_models, loop_losses = _train_loop(models, batches, lambda p: torch.optim.SGD(p, **hyper))
    ens, ens_losses = _train_ensemble(models, batches, FunctionalSGD(**hyper))
    _compare(models, ens, loop_models, loop_losses, ens_losses, tol)


def test_adamw_matches_torch_adamw_exactly():
    g = torch.Generator().manual_seed(0)
    p_ref = torch.randn(4, 5, generator=g, dtype=torch.float64, requires_grad=True)
    p_fun = p_ref.detach().clone()
    opt = torch.optim.AdamW([p_ref], lr=1e-2, weight_decay=0.1)
    fopt = make_functional_optimizer("adamw", lr=1e-2, weight_decay=0.1)
    for _ in range(10):
        grad = torch.randn(4, 5, generator=g, dtype=torch.float64)
        p_ref.grad = grad.clone()
        opt.step()
        fopt.step([p_fun], [grad.clone()])
    assert torch.equal(p_fun, p_ref.detach())


def test_generic_module_shared_inputs_cross_entropy_and_grads():
    """Any nn.Module, one batch for all members, a classification loss; gradients checked."""
    torch.manual_seed(0)
    nets = [nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3)).double() for _ in range(4)]
    ens = Ensemble(nets)
    x = torch.randn(10, 5, dtype=torch.float64)
    y = torch.randint(0, 3, (10,))
    trainer = EnsembleTrainer(ens, F.cross_entropy, FunctionalSGD(lr=0.1), inputs="shared")
    out = trainer.step(x, y, return_grads=True)
    for s, net in enumerate(nets):
        loss = F.cross_entropy(net(x), y)
        grads = torch.autograd.grad(loss, list(net.parameters()))
        assert torch.allclose(out.losses["default"][s], loss.detach(), rtol=1e-12)
        for (name, _), ref in zip(net.named_parameters(), grads):
            assert torch.allclose(out.grads["default"][name][s], ref, rtol=1e-10, atol=1e-14)
    # the caller's models are untouched; the ensemble moved
    assert not torch.allclose(ens.flat_params("default")[0],
                              torch.nn.utils.parameters_to_vector(nets[0].parameters()))
    member = ens.member("default", 2)
    assert torch.allclose(torch.nn.utils.parameters_to_vector(member.parameters()),
                          ens.flat_params("default")[2])


def test_paired_conditions_share_initialisation():
    models = _paired_models(torch.float64)
    ens = Ensemble(models)
    assert torch.equal(ens.flat_params("plain"), ens.flat_params("shifted"))
    # but the conditions compute different functions
    x = torch.randn(SEEDS, 4, 6, dtype=torch.float64)
    out = ens.call(x)
    assert not torch.allclose(out["plain"], out["shifted"])


def test_diverging_member_is_recorded_and_frozen_others_continue():
    models = _paired_models(torch.float64)
    ens = Ensemble(models)
    trainer = EnsembleTrainer(ens, F.mse_loss, FunctionalAdam(lr=1e-2))
    x, y = _batches(1, torch.float64)[0]
    trainer.step(x, y)
    bad_y = y.clone()
    bad_y[1] = float("nan")  # seed 1 of both conditions sees a poisoned target
    before = ens.flat_params("plain").clone()
    trainer.step(x, bad_y)
    assert trainer.diverged.tolist() == [[False, True, False], [False, True, False]]
    after = ens.flat_params("plain")
    assert torch.equal(after[1], before[1])
    assert not torch.equal(after[0], before[0])
    assert torch.isfinite(after).all()
    trainer.step(x, y)
    assert torch.equal(ens.flat_params("plain")[1], before[1])


def test_bad_inputs_raise_clear_errors():
    models = _paired_models(torch.float64)
    with pytest.raises(ValueError, match="same number of seeds"):
        Ensemble({"a": models["plain"], "b": models["shifted"][:2]})
    with pytest.raises(ValueError, match="adam"):
        make_functional_optimizer("adm", lr=1e-3)
    with pytest.raises(ValueError, match="lr"):
        FunctionalAdam(lr=-1.0)
    with pytest.raises(ValueError, match="inputs"):
        EnsembleTrainer(Ensemble(models), F.mse_loss, FunctionalAdam(), inputs="bogus")


def test_flop_count_of_residual_mlp_matches_formula():
    model = ResidualMLP(6, 12, 3, "relu")
    flops = count_step_flops(model, F.mse_loss, torch.randn(16, 6), torch.randn(16, 6))
    # forward 2*B*d*m per linear, backward twice that (input and weight grads), first
    # block's input gradient is needed too (x requires no grad, but the residual path does)
    per_linear = 2 * 16 * 6 * 12
    assert flops >= 3 * 2 * 3 * per_linear - 2 * per_linear
    assert flops <= 3 * 2 * 3 * per_linear


@pytest.mark.parametrize("fused", [True, False])
def test_adam_paths_match_torch_with_non_contiguous_grads(fused):
    """Both update paths equal torch.optim.Adam, also for transposed gradients (vmap makes
    them; PyTorch's fused CPU kernel alone would mis-pair their elements)."""
    g = torch.Generator().manual_seed(1)
    p_ref = torch.randn(4, 5, generator=g, dtype=torch.float64, requires_grad=True)
    p_fun = p_ref.detach().clone()
    opt = torch.optim.Adam([p_ref], lr=1e-2, weight_decay=0.05)
    fopt = FunctionalAdam(lr=1e-2, weight_decay=0.05, fused=fused)
    for _ in range(6):
        grad = torch.randn(5, 4, generator=g, dtype=torch.float64).t()
        assert not grad.is_contiguous()
        p_ref.grad = grad.clone()
        opt.step()
        fopt.step([p_fun], [grad])
    assert _relative(p_fun, p_ref.detach()) < 1e-14
    assert fopt._use_fused([p_fun]) is fused


def test_adam_state_round_trip_continues_identically():
    g = torch.Generator().manual_seed(2)
    params = [torch.randn(3, 4, generator=g), torch.randn(3, generator=g)]
    grads = [[torch.randn_like(p) for p in params] for _ in range(6)]
    full = FunctionalAdam(lr=1e-2)
    a = [p.clone() for p in params]
    for gs in grads:
        full.step(a, gs)
    first = FunctionalAdam(lr=1e-2)
    b = [p.clone() for p in params]
    for gs in grads[:3]:
        first.step(b, gs)
    second = FunctionalAdam(lr=1e-2)
    second.load_state_dict(first.state_dict())
    for gs in grads[3:]:
        second.step(b, gs)
    assert second.steps == 6
    for x, y in zip(a, b):
        assert torch.equal(x, y)


def test_adam_skips_tensors_without_gradient():
    """A tensor with no gradient keeps its value and its own step count, as in torch.optim."""
    p = [torch.ones(2), torch.ones(2)]
    opt = FunctionalAdam(lr=0.1)
    opt.step(p, [torch.ones(2), None])
    assert torch.equal(p[1], torch.ones(2)) and not torch.equal(p[0], torch.ones(2))
    assert opt.state_dict()["tensor_steps"] == [1, 0]


def test_keep_freed_memory_applies_once_on_linux(monkeypatch):
    import sys

    from actlab.train import allocator, ensemble

    applied = allocator.keep_freed_memory()
    assert applied is sys.platform.startswith("linux")  # glibc on Linux, no-op elsewhere
    assert allocator.keep_freed_memory() is applied  # idempotent
    calls = []
    monkeypatch.setattr(ensemble, "keep_freed_memory", lambda: calls.append(1))
    models = [ResidualMLP(4, 8, 1, generator=torch.Generator().manual_seed(0))]
    EnsembleTrainer(Ensemble(models), F.mse_loss, FunctionalAdam(), keep_freed_memory=False)
    assert calls == []
    EnsembleTrainer(Ensemble(models), F.mse_loss, FunctionalAdam())
    assert calls == [1]


def test_freeze_stops_one_member_and_checks_its_arguments():
    models = [ResidualMLP(4, 8, 1, generator=torch.Generator().manual_seed(s)) for s in range(2)]
    trainer = EnsembleTrainer(Ensemble(models), F.mse_loss, FunctionalAdam(lr=0.1))
    before = trainer.ensemble.flat_params("default")
    trainer.freeze("default", 1)
    x, y = torch.randn(2, 5, 4), torch.randn(2, 5, 4)
    trainer.step(x, y)
    after = trainer.ensemble.flat_params("default")
    assert torch.equal(after[1], before[1]) and not torch.equal(after[0], before[0])
    with pytest.raises(ValueError, match="condition"):
        trainer.freeze("nope", 0)
    with pytest.raises(ValueError, match="seed_index"):
        trainer.freeze("default", 2)


def test_member_copy_runs_with_its_own_shift_when_a_group_mixes_shifts():
    # One group may hold modules that differ only in a buffer a module read when built
    # (the shift); the standalone copy of each member must compute what that member does.
    from actlab import activation

    def mlp(spec: str) -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(3, 5), activation(spec), nn.Linear(5, 2))

    models = [mlp("relu"), mlp("relu:shift=0.3")]
    ens = Ensemble({"all": models})
    x = torch.randn(4, 3)
    with torch.no_grad():
        for i, model in enumerate(models):
            torch.testing.assert_close(ens.member("all", i)(x), model(x))
        assert not torch.allclose(models[0](x), models[1](x))
