"""ResidualMLP's fused ensemble kernels against the vmapped path, a loop of ordinary models
with torch.optim.Adam, and finite differences."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
import torch.nn.functional as F

from actlab.activations import native
from actlab.nn import residual_stack
from actlab.nn.residual_mlp import ResidualMLP
from actlab.train.ensemble import Ensemble, EnsembleTrainer
from actlab.train.functional_optim import FunctionalAdam

SPECS = ["relu", "relu:shift=theory", "gelu:shift=theory", "silu", "sigmoid:shift=0.5", "tanh"]


@pytest.fixture(scope="module")
def built():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        native.enable(True)
        if residual_stack.extension() is None:
            native.enable(False)
            pytest.skip(f"fused kernels cannot be built here: {native.build_error()}")
    native.enable(False)
    yield
    native.enable(False)


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).detach().norm() / b.detach().norm())


def _models(spec: str, dtype: torch.dtype, seeds: int = 4, d: int = 6, m: int = 9, blocks: int = 3,
            **kwargs) -> list[ResidualMLP]:
    models = []
    for s in range(seeds):
        g = torch.Generator().manual_seed(s)
        model = ResidualMLP(d, m, blocks, spec, generator=g, **kwargs).to(dtype)
        with torch.no_grad():  # LayerNorm away from (1, 0), so its parameters matter
            for block in model.blocks:
                block.norm.weight.add_(0.3 * torch.randn(d, generator=g, dtype=dtype))
                block.norm.bias.add_(0.3 * torch.randn(d, generator=g, dtype=dtype))
        models.append(model)
    return models


def _losses_and_grads(ens: Ensemble, x, y, fused: bool, inputs: str = "per_seed"):
    native.enable(fused)
    try:
        losses = ens.losses(F.mse_loss, x, y, inputs=inputs)
        grads = torch.autograd.grad(sum(v.sum() for v in losses.values()), ens.parameters())
    finally:
        native.enable(False)
    return losses, grads


def _fused_calls(monkeypatch) -> list[int]:
    """Count the fused forwards that actually ran (a ``None`` result is a fallback)."""
    calls: list[int] = []
    original = residual_stack.ensemble_forward

    def spy(*args, **kwargs):
        out = original(*args, **kwargs)
        if out is not None:
            calls.append(1)
        return out

    monkeypatch.setattr(residual_stack, "ensemble_forward", spy)
    return calls


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 2e-6)])
def test_fused_equals_vmap(built, monkeypatch, spec, dtype, tol):
    """Losses and every parameter gradient, on sizes that are not multiples of the vector
    width (so the tails run)."""
    ens = Ensemble(_models(spec, dtype))
    g = torch.Generator().manual_seed(9)
    x = torch.randn(4, 7, 6, generator=g, dtype=dtype) * 2
    y = torch.randn(4, 7, 6, generator=g, dtype=dtype)
    calls = _fused_calls(monkeypatch)
    ref_losses, ref_grads = _losses_and_grads(ens, x, y, fused=False)
    assert calls == []
    losses, grads = _losses_and_grads(ens, x, y, fused=True)
    assert calls == [1]
    assert _relative(losses["default"], ref_losses["default"]) < tol
    for got, ref in zip(grads, ref_grads, strict=True):
        assert _relative(got, ref) < tol


def test_adam_training_equals_a_loop_of_models(built):
    """25 Adam steps of two paired conditions, fused, against torch.optim.Adam per model."""
    dtype = torch.float64
    base = _models("relu", dtype, seeds=3, d=5, m=11, blocks=2)
    models = {"plain": base, "shifted": [m.with_activation("relu:shift=theory") for m in base]}
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(3, 13, 5, generator=g, dtype=dtype),
                torch.randn(3, 13, 5, generator=g, dtype=dtype)) for _ in range(25)]
    loop = {c: [copy.deepcopy(m) for m in group] for c, group in models.items()}
    opts = {c: [torch.optim.Adam(m.parameters(), lr=3e-3) for m in group]
            for c, group in loop.items()}
    for x, y in batches:
        for c, group in loop.items():
            for s, model in enumerate(group):
                opts[c][s].zero_grad()
                F.mse_loss(model(x[s]), y[s]).backward()
                opts[c][s].step()
    ens = Ensemble(models)
    trainer = EnsembleTrainer(ens, F.mse_loss, FunctionalAdam(lr=3e-3))
    native.enable(True)
    try:
        for x, y in batches:
            trainer.step(x, y)
    finally:
        native.enable(False)
    for c, group in loop.items():
        for s, model in enumerate(group):
            ref = torch.nn.utils.parameters_to_vector(model.parameters())
            start = torch.nn.utils.parameters_to_vector(models[c][s].parameters()).detach()
            assert _relative(ens.flat_params(c)[s], ref) < 1e-12
            assert _relative(ref, start) > 1e-3  # training moved the parameters


def test_members_with_different_shifts_in_one_group(built):
    """Teacher-student stacks unshifted and shifted students as one condition: the shift
    is a per-member buffer."""
    dtype = torch.float64
    base = _models("gelu", dtype, seeds=2)
    group = [m.with_activation(spec) for m in base for spec in ("gelu:shift=0", "gelu:shift=theory")]
    ens = Ensemble(group)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(4, 8, 6, generator=g, dtype=dtype)
    y = torch.randn(4, 8, 6, generator=g, dtype=dtype)
    ref_losses, ref_grads = _losses_and_grads(ens, x, y, fused=False)
    losses, grads = _losses_and_grads(ens, x, y, fused=True)
    assert _relative(losses["default"], ref_losses["default"]) < 1e-12
    assert all(_relative(a, b) < 1e-12 for a, b in zip(grads, ref_grads, strict=True))
    assert not torch.allclose(losses["default"][0], losses["default"][1])  # shifts differ


def test_shared_inputs_and_a_diverging_member(built):
    """One batch for all members; a member with non-finite weights leaves the others exact."""
    dtype = torch.float64
    ens = Ensemble(_models("silu", dtype))
    with torch.no_grad():
        ens.params["default"]["blocks.1.up.weight"][2, 0, 0] = float("inf")
    g = torch.Generator().manual_seed(3)
    x = torch.randn(10, 6, generator=g, dtype=dtype)
    y = torch.randn(10, 6, generator=g, dtype=dtype)
    ref_losses, ref_grads = _losses_and_grads(ens, x, y, fused=False, inputs="shared")
    losses, grads = _losses_and_grads(ens, x, y, fused=True, inputs="shared")
    healthy = [0, 1, 3]
    assert not torch.isfinite(losses["default"][2])
    assert _relative(losses["default"][healthy], ref_losses["default"][healthy]) < 1e-12
    for got, ref in zip(grads, ref_grads, strict=True):
        assert torch.isfinite(got[healthy]).all()
        assert _relative(got[healthy], ref[healthy]) < 1e-12


def test_gradcheck_against_finite_differences(built):
    """Input and parameter gradients of the raw function, float64 finite differences."""
    dtype = torch.float64
    ens = Ensemble(_models("gelu:shift=theory", dtype, seeds=2, d=4, m=5, blocks=2))
    params = {k: v.detach().clone().requires_grad_(True) for k, v in ens.params["default"].items()}
    buffers = ens.buffers["default"]
    template = ResidualMLP(4, 5, 2, "gelu:shift=theory").to("meta")
    names = list(params)
    g = torch.Generator().manual_seed(4)
    x = torch.randn(2, 3, 4, generator=g, dtype=dtype, requires_grad=True)

    def fn(x_, *tensors):
        return residual_stack.ensemble_forward(template, dict(zip(names, tensors)), buffers, x_)

    native.enable(True)
    try:
        assert fn(x, *params.values()) is not None
        assert torch.autograd.gradcheck(fn, (x, *params.values()), eps=1e-6, atol=1e-7)
    finally:
        native.enable(False)


@pytest.mark.parametrize("kwargs,spec", [
    ({"norm": "post"}, "relu"),
    ({"bias": True}, "relu"),
    ({}, "gelu:tanh"),
    ({}, "relu:adaptive"),
    ({}, "leaky_relu"),
])
def test_other_structures_fall_back_to_vmap(built, monkeypatch, kwargs, spec):
    model = ResidualMLP(6, 9, 2, spec, **kwargs)
    assert residual_stack.fused_plan(model) is None
    calls = _fused_calls(monkeypatch)
    ens = Ensemble([model, copy.deepcopy(model)])
    x = torch.randn(2, 5, 6)
    native.enable(True)
    try:
        out = ens.losses(F.mse_loss, x, torch.zeros_like(x))["default"]
    finally:
        native.enable(False)
    assert calls == [] and torch.isfinite(out).all()


def test_disabled_means_vmap(built, monkeypatch):
    calls = _fused_calls(monkeypatch)
    ens = Ensemble(_models("relu", torch.float32))
    x = torch.randn(4, 5, 6)
    ens.losses(F.mse_loss, x, x)
    assert calls == []


def test_threads_split_members_without_changing_results(built):
    """Each member runs on one thread, so the thread count cannot change any bit."""
    ens = Ensemble(_models("relu:shift=theory", torch.float32, seeds=5, d=20, m=80, blocks=2))
    g = torch.Generator().manual_seed(5)
    x = torch.randn(5, 64, 20, generator=g)
    threads = torch.get_num_threads()
    results = []
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            results.append(_losses_and_grads(ens, x, x, fused=True))
    finally:
        torch.set_num_threads(threads)
    (l1, g1), (l2, g2) = results
    assert torch.equal(l1["default"], l2["default"])
    assert all(torch.equal(a, b) for a, b in zip(g1, g2, strict=True))
