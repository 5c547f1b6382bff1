"""CUDA-graph support that the CPU can check: the learning rate held in a tensor (as a
recorded step reads it), step counts on the parameters' device, and clear refusals.

The graphed step itself (recorded and replayed against the eager step) is tested in
``test_cuda.py`` and runs only on a GPU.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from actlab.nn.residual_mlp import ResidualMLP
from actlab.train.ensemble import Ensemble, EnsembleTrainer
from actlab.train.functional_optim import FunctionalAdam, FunctionalSGD
from actlab.train.graphed import GraphedStep


def _lr_at(step: int) -> float:
    """A schedule with two changes inside 50 steps (warm-up, then a decay)."""
    return 1e-3 * min(1.0, (step + 1) / 10) * (0.5 if step >= 30 else 1.0)


@pytest.mark.parametrize("decoupled", [False, True])
def test_adam_with_its_lr_in_a_tensor_follows_a_schedule_like_torch_adam(decoupled):
    # The reference: torch.optim.Adam(W) with its param_groups' lr set before every step.
    g = torch.Generator().manual_seed(0)
    start = [torch.randn(4, 6, generator=g), torch.randn(6, generator=g)]
    grads = [[torch.randn_like(p) for p in start] for _ in range(50)]
    ref = [p.clone().requires_grad_() for p in start]
    torch_opt = (torch.optim.AdamW if decoupled else torch.optim.Adam)(
        ref, lr=1.0, weight_decay=0.1)
    ours = [p.clone() for p in start]
    opt = FunctionalAdam(lr=_lr_at(0), weight_decay=0.1, decoupled=decoupled)
    opt.hold_lr_in_tensor("cpu")
    for step, grad in enumerate(grads):
        for group in torch_opt.param_groups:
            group["lr"] = _lr_at(step)
        for p, gr in zip(ref, grad):
            p.grad = gr.clone()
        torch_opt.step()
        opt.lr = _lr_at(step)
        opt.step(ours, [gr.clone() for gr in grad])
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a, b.detach(), rtol=1e-6, atol=1e-7)
    assert opt.steps == 50
    assert float(opt._lr_tensor) == pytest.approx(_lr_at(49))


def test_adam_step_counts_live_on_the_parameters_device_and_survive_a_state_round_trip():
    params = [torch.zeros(3)]
    opt = FunctionalAdam(lr=0.1)
    for _ in range(3):
        opt.step(params, [torch.ones(3)])
    state = opt.state_dict()
    assert state["steps"] == 3 and state["tensor_steps"] == [3]
    restored = FunctionalAdam(lr=0.1)
    restored.load_state_dict(state)
    assert restored._step_tensors[0].device == params[0].device
    a, b = [params[0].clone()], [params[0].clone()]
    opt.step(a, [torch.ones(3)])
    restored.step(b, [torch.ones(3)])
    torch.testing.assert_close(a[0], b[0], rtol=0, atol=0)


def test_only_fused_adam_on_cuda_claims_it_can_be_recorded():
    cpu = [torch.zeros(2)]
    assert not FunctionalAdam().supports_graph_capture(cpu)
    assert not FunctionalSGD().supports_graph_capture(cpu)
    with pytest.raises(NotImplementedError, match="FunctionalSGD"):
        FunctionalSGD().hold_lr_in_tensor("cpu")


def _trainer(**kwargs) -> EnsembleTrainer:
    models = [ResidualMLP(4, 8, 2, "relu", generator=torch.Generator().manual_seed(s))
              for s in range(2)]
    return EnsembleTrainer(Ensemble(models), nn.functional.mse_loss, FunctionalAdam(lr=1e-2),
                           keep_freed_memory=False, **kwargs)


def test_graphed_true_on_the_cpu_is_refused_with_the_reason():
    with pytest.raises(ValueError, match="graphed: CUDA graphs need a CUDA ensemble"):
        _trainer(graphed=True)
    with pytest.raises(ValueError, match="device: CUDA graphs need a CUDA device"):
        GraphedStep(lambda x, y: x, "cpu")


def test_default_on_the_cpu_is_the_eager_step():
    x, y = torch.randn(2, 5, 4), torch.randn(2, 5, 4)
    auto, eager = _trainer(), _trainer(graphed=False)
    for _ in range(5):
        a, b = auto.step(x, y), eager.step(x, y)
        torch.testing.assert_close(a.losses["default"], b.losses["default"], rtol=0, atol=0)
    assert auto.optimizer._lr_tensor is None  # nothing was prepared for a graph
