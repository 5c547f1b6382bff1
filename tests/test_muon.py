"""``optimizer="muon"``: the parameter split, one step against a hand-written Muon step, the
combined optimizer's state, the engine's learning rates, and the refusals (ensemble engine,
a torch without ``torch.optim.Muon``)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from actlab.errors import ConfigError
from actlab.nn.gpt import GPT, GPTConfig
from actlab.train.loop import TrainConfig, Trainer, lr_at, make_engine_optimizer
from actlab.train.muon import CombinedOptimizer, make_muon, muon_split, ns_torch_dtype
from actlab.train.optim import functional_optimizer_for, make_optimizer
from actlab.train.settings import TrainSettings

NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)  # the quintic of torch.optim.Muon and the paper's code


def newton_schulz(g: torch.Tensor, steps: int = 5, eps: float = 1e-7) -> torch.Tensor:
    """The quintic Newton-Schulz orthogonalisation in float64, written out."""
    a, b, c = NS_COEFFICIENTS
    x = g.double()
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = x.T
    x = x / max(float(x.norm()), eps)
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if tall else x


def test_split_on_our_gpt_gives_the_hidden_matrices_to_muon() -> None:
    for ffn, mlp in (("plain", ("up", "down")), ("swiglu", ("gate_proj", "up", "down"))):
        model = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=16, block_size=8, ffn=ffn), seed=0)
        hidden, other = muon_split(model)
        expected = [f"blocks.{i}.{part}.weight" for i in range(2)
                    for part in ("attn.qkv", "attn.proj", *(f"mlp.{m}" for m in mlp))]
        assert sorted(n for n, _ in hidden) == sorted(expected)
        names = {n for n, _ in other}
        # the tied embedding/head once, the positions, every norm and bias
        assert {"wte.weight", "wpe.weight", "norm_f.weight", "norm_f.bias"} <= names
        assert all(n.endswith(".bias") or "norm" in n for n in names - {"wte.weight", "wpe.weight"})
        assert len(hidden) + len(other) == len(list(model.parameters()))  # each once


def test_split_keeps_an_untied_head_and_embeddings_off_muon() -> None:
    model = nn.Sequential(nn.Embedding(10, 6), nn.Linear(6, 6), nn.ReLU(), nn.Linear(6, 10))
    hidden, other = muon_split(model)
    assert [n for n, _ in hidden] == ["1.weight"]
    assert [n for n, _ in other] == ["0.weight", "1.bias", "3.weight", "3.bias"]
    hidden, _ = muon_split(model, head="1")  # name the output layer yourself
    assert [n for n, _ in hidden] == ["3.weight"]
    with pytest.raises(ConfigError, match="head"):
        muon_split(model, head="2")


@pytest.mark.parametrize("shape", [(3, 5), (6, 4)])
def test_one_step_equals_a_hand_written_muon_step(shape) -> None:
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(*shape, generator=gen).requires_grad_(True)
    bias = torch.randn(shape[0], generator=gen).requires_grad_(True)
    bias_ref = bias.detach().clone().requires_grad_(True)
    lr, ratio, momentum, decay = 0.02, 0.1, 0.95, 0.1
    opt = make_muon([weight, bias], lr, lr_ratio=ratio, momentum=momentum, weight_decay=0.0,
                    betas=(0.9, 0.95), muon_weight_decay=decay, ns_dtype="float32")
    adam = torch.optim.AdamW([bias_ref], lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    # the released code's form: the momentum a sum, Nesterov g + m buf, step
    # lr * ratio * sqrt(max(A, B)) * NS(update); decoupled decay at the group rate lr * ratio / 0.2
    buf = torch.zeros(shape, dtype=torch.float64)
    for _ in range(3):
        grad, grad_b = torch.randn(*shape, generator=gen), torch.randn(shape[0], generator=gen)
        weight.grad, bias.grad, bias_ref.grad = grad.clone(), grad_b.clone(), grad_b.clone()
        before = weight.detach().double().clone()
        buf = momentum * buf + grad.double()
        step = lr * ratio * math.sqrt(max(shape)) * newton_schulz(grad.double() + momentum * buf)
        expected = before * (1 - lr * ratio / 0.2 * decay) - step
        opt.step()
        adam.step()
        error = float((weight.detach().double() - expected).abs().max())
        # float32: one ulp of the largest weight (the parameter's own rounding) plus 2^-16 of
        # the step for five iterations of rounded float32 products
        tol = 2.0**-23 * float(before.abs().max()) + 2.0**-16 * float(step.abs().max())
        assert error <= tol
        # the test tells the conventions apart: torch's "original" rate sqrt(max(1, A/B))
        original = step / (0.2 * math.sqrt(max(shape))) * math.sqrt(max(1, shape[0] / shape[1]))
        other = before * (1 - lr * ratio / 0.2 * decay) - original
        assert float((weight.detach().double() - other).abs().max()) > 100 * tol
        torch.testing.assert_close(bias.detach(), bias_ref.detach(), rtol=0, atol=0)


@pytest.mark.parametrize("shape", [(3, 5), (6, 4), (8, 8)])
def test_in_bfloat16_the_step_is_torch_optim_muons_to_the_bit(shape) -> None:
    gen = torch.Generator().manual_seed(1)
    ours = torch.randn(*shape, generator=gen).requires_grad_(True)
    theirs = ours.detach().clone().requires_grad_(True)
    opt = make_muon([ours], 0.05, lr_ratio=0.1, momentum=0.9, muon_weight_decay=0.01,
                    ns_dtype="bfloat16", nesterov=shape[0] != 8)
    group = opt.optimizers[-1].param_groups[0]
    torch_opt = torch.optim.Muon([theirs], lr=group["lr"], weight_decay=0.01, momentum=0.9,
                                 nesterov=shape[0] != 8, adjust_lr_fn="match_rms_adamw")
    for _ in range(4):
        grad = torch.randn(*shape, generator=gen)
        ours.grad, theirs.grad = grad.clone(), grad.clone()
        opt.step()
        torch_opt.step()
        assert torch.equal(ours, theirs)
    start = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
    assert not torch.allclose(ours.detach(), start)  # the steps moved the weights


def test_plain_tensors_split_by_dimension_and_weight_decay_is_explicit() -> None:
    w, b = torch.zeros(3, 4, requires_grad=True), torch.zeros(4, requires_grad=True)
    opt = make_optimizer("muon", [w, b], 1e-3)
    assert isinstance(opt, CombinedOptimizer)
    adam, muon = opt.optimizers
    assert type(adam) is torch.optim.AdamW and isinstance(muon, torch.optim.Muon)
    assert adam.param_groups[0]["params"] == [b] and muon.param_groups[0]["params"] == [w]
    assert muon.param_groups[0]["weight_decay"] == 0.0  # not torch.optim.Muon's default 0.1
    assert muon.param_groups[0]["adjust_lr_fn"] == "match_rms_adamw"
    assert muon.param_groups[0]["lr"] == pytest.approx(1e-3 * 0.1 / 0.2)
    assert muon.param_groups[0]["ns_dtype"] == "auto"
    assert ns_torch_dtype("auto", torch.device("cpu")) == torch.float32
    assert ns_torch_dtype("auto", torch.device("cuda")) == torch.bfloat16
    with pytest.raises(ConfigError, match="muon_ns_dtype"):
        TrainSettings(muon_ns_dtype="fp8")
    with pytest.raises(ConfigError, match="no hidden weight matrices"):
        make_optimizer("muon", [b], 1e-3)


def _tiny_gpt(seed: int = 0) -> GPT:
    return GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=32), seed=seed)


def _batches(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + step)
    x = torch.randint(0, 32, (4, 8), generator=g)
    return x, torch.roll(x, -1, dims=1)


def _muon_trainer(folder, on_step=None, seed: int = 0) -> Trainer:
    config = TrainConfig(optimizer="muon", steps=6, warmup=2, warmdown=2, schedule="trapezoid",
                         weight_decay=0.0, grad_clip=0.0, eval_every=0, log_every=1,
                         checkpoint_every=3, muon_lr_ratio=0.3)
    return Trainer(_tiny_gpt(seed), config, _batches, checkpoint_dir=folder, on_step=on_step)


def test_engine_sets_each_groups_rate_and_resumes_exactly(tmp_path) -> None:
    trainer = _muon_trainer(tmp_path / "full")
    full = trainer.fit()
    config = trainer.config
    for group in trainer.optimizer.param_groups:  # the rate of the last update, per group
        assert group["lr"] == pytest.approx(lr_at(5, config) * group.get("lr_scale", 1.0),
                                            rel=1e-12)
    assert trainer.optimizer.param_groups[-1]["lr_scale"] == pytest.approx(0.3 / 0.2)
    assert [h["lr"] for h in full.history] == [lr_at(s, config) for s in range(6)]

    class Killed(Exception):
        pass

    def kill_at_4(step: int, loss: float) -> None:
        if step == 4:
            raise Killed

    with pytest.raises(Killed):
        _muon_trainer(tmp_path / "cut", on_step=kill_at_4).fit()  # last checkpoint: step 3
    resumed = _muon_trainer(tmp_path / "cut", seed=5)  # another init: must come from the file
    assert resumed.fit(resume=True).step == 6
    for a, b in zip(trainer.model.parameters(), resumed.model.parameters()):
        assert torch.equal(a, b)
    momentum = [s["momentum_buffer"] for s in resumed.optimizer.optimizers[1].state.values()]
    assert len(momentum) == 4 and all(m.abs().sum() > 0 for m in momentum)


def test_engine_optimizer_for_muon_keeps_vectors_undecayed() -> None:
    config = TrainConfig(optimizer="muon", weight_decay=0.1, decay_vectors=False)
    opt = make_engine_optimizer(_tiny_gpt(), config)
    adam, muon = opt.optimizers
    decays = [(g["weight_decay"], {p.dim() for p in g["params"]}) for g in adam.param_groups]
    assert decays == [(0.1, {2}), (0.0, {1})]  # the embedding decays, norms and biases do not
    assert muon.param_groups[0]["weight_decay"] == 0.1  # muon_weight_decay None: weight_decay
    opt = make_engine_optimizer(_tiny_gpt(), TrainConfig(optimizer="muon", muon_weight_decay=0.0))
    assert opt.optimizers[1].param_groups[0]["weight_decay"] == 0.0


def test_ensemble_engine_refuses_muon_in_one_line() -> None:
    with pytest.raises(ConfigError) as err:
        functional_optimizer_for(TrainSettings(optimizer="muon"))
    assert err.value.field == "optimizer" and "EnsembleTrainer" in str(err.value)
    assert "\n" not in str(err.value)


def test_a_torch_without_muon_gets_a_clear_error(monkeypatch) -> None:
    monkeypatch.delattr(torch.optim, "Muon")
    for build in (lambda: TrainSettings(optimizer="muon"),
                  lambda: make_optimizer("muon", [torch.zeros(2, 2, requires_grad=True)], 1e-3)):
        with pytest.raises(ConfigError, match=r"torch.optim.Muon \(PyTorch >= 2.9\)") as err:
            build()
        assert err.value.field == "optimizer"
    TrainSettings(optimizer="adamw")  # the others are unaffected
