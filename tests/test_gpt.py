"""The small GPT: shapes, gradients, causality, tied embeddings, parameter/FLOP counts, learning."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from actlab.errors import ConfigError
from actlab.nn.ffn import FFN, GatedFFN, ffn_param_count
from actlab.nn.gpt import GPT, GPTConfig
from actlab.train.loop import TrainConfig, Trainer

TINY = dict(vocab_size=32, block_size=12, n_layer=2, n_head=2, n_embd=16)


@pytest.mark.parametrize("ffn, norm", [("plain", "layernorm"), ("swiglu", "rmsnorm"),
                                       ("reglu", "percentile"), ("geglu", "none"),
                                       ("glu", "layernorm")])
def test_forward_backward_shapes_and_gradients(ffn: str, norm: str) -> None:
    model = GPT(GPTConfig(**TINY, ffn=ffn, norm=norm), seed=0)
    idx = torch.randint(0, 32, (3, 10), generator=torch.Generator().manual_seed(1))
    logits, loss = model(idx, targets=idx)
    assert logits.shape == (3, 10, 32) and loss.shape == ()
    assert model(idx)[1] is None
    loss.backward()
    for name, param in model.named_parameters():
        assert param.grad is not None and torch.isfinite(param.grad).all(), name
        assert param.grad.abs().sum() > 0, name
    assert len(model.blocks) == 2 and isinstance(model.blocks, nn.ModuleList)
    assert isinstance(model.blocks[0].mlp, GatedFFN if ffn != "plain" else FFN)


def test_loss_matches_cross_entropy_and_gradient_matches_finite_differences() -> None:
    model = GPT(GPTConfig(**TINY, activation="gelu"), seed=3).double()
    idx = torch.randint(0, 32, (2, 6), generator=torch.Generator().manual_seed(2))
    targets = torch.roll(idx, -1, dims=1)
    logits, loss = model(idx, targets=targets)
    reference = nn.functional.cross_entropy(logits.reshape(-1, 32), targets.reshape(-1))
    assert loss.item() == pytest.approx(reference.item(), rel=1e-12)
    # one weight of an MLP up-projection: autograd vs central differences in float64
    loss.backward()
    weight = model.blocks[1].mlp.up.weight
    i, j, h = 3, 5, 1e-6
    analytic = weight.grad[i, j].item()
    with torch.no_grad():
        weight[i, j] += h
        plus = model(idx, targets=targets)[1].item()
        weight[i, j] -= 2 * h
        minus = model(idx, targets=targets)[1].item()
    assert analytic == pytest.approx((plus - minus) / (2 * h), rel=1e-5, abs=1e-9)


def test_causal_future_tokens_do_not_change_earlier_logits() -> None:
    model = GPT(GPTConfig(**TINY), seed=0).eval()
    idx = torch.randint(0, 32, (1, 12), generator=torch.Generator().manual_seed(0))
    changed = idx.clone()
    changed[0, 7:] = (changed[0, 7:] + 1) % 32
    a, b = model(idx)[0], model(changed)[0]
    assert torch.allclose(a[:, :7], b[:, :7], atol=1e-6)
    assert not torch.allclose(a[:, 7:], b[:, 7:], atol=1e-3)


def test_tied_embeddings_seeded_init_and_counts() -> None:
    config = GPTConfig(**TINY)
    model = GPT(config, seed=5)
    assert model.lm_head.weight is model.wte.weight
    distinct = {id(p): p.numel() for p in model.parameters()}
    assert model.num_params() == sum(distinct.values())
    assert torch.equal(GPT(config, seed=5).wte.weight, model.wte.weight)
    assert not torch.equal(GPT(config, seed=6).wte.weight, model.wte.weight)
    assert model.wte.weight.std().item() == pytest.approx(0.02, rel=0.15)
    # residual projections get the 1/sqrt(2 n_layer) scale
    assert model.blocks[0].mlp.down.weight.std().item() == pytest.approx(0.02 / 2, rel=0.15)
    for ffn in ("plain", "swiglu"):
        m = GPT(GPTConfig(**TINY, ffn=ffn), seed=0)
        counted = sum(p.numel() for block in m.blocks for p in block.mlp.parameters())
        assert m.ffn_params() == counted
        assert counted == 2 * ffn_param_count(16, m.config.hidden, gated=ffn != "plain", bias=True)


def test_gated_width_matches_parameters() -> None:
    config = dict(vocab_size=256, block_size=64, n_layer=2, n_head=4, n_embd=64)
    plain = GPT(GPTConfig(**config), seed=0)
    for kind in ("reglu", "geglu", "swiglu"):
        gated = GPT(GPTConfig(**config, ffn=kind), seed=0)
        assert gated.config.hidden < plain.config.hidden
        # nearest integer width: each layer misses by at most half a width step (3d + 2)
        assert abs(gated.num_params() - plain.num_params()) <= 2 * (3 * 64 + 2) / 2


def test_flops_per_token_matches_torch_flop_counter() -> None:
    for ffn in ("plain", "swiglu"):
        config = GPTConfig(**TINY, ffn=ffn)
        model = GPT(config, seed=0).eval()
        t = config.block_size
        idx = torch.zeros(1, t, dtype=torch.long)
        with FlopCounterMode(display=False) as counter:
            model(idx)
        # torch counts the linear layers' matrix products; add what it leaves out: bias adds,
        # the gating product, and attention scores/values (4 T d per token and layer; the
        # counter does not see the CPU attention kernel)
        extra = sum(m.out_features for m in model.modules()
                    if isinstance(m, nn.Linear) and m.bias is not None)
        if config.gated:
            extra += config.n_layer * config.hidden
        extra += config.n_layer * 4 * t * config.n_embd
        assert model.flops_per_token() * t == counter.get_total_flops() + extra * t


def test_loss_falls_on_a_tiny_corpus() -> None:
    text = torch.tensor(list(b"the cat sat on the mat. " * 40)) % 32
    config = GPTConfig(**TINY)
    model = GPT(config, seed=0)

    def batch(step: int):
        g = torch.Generator().manual_seed(step)
        starts = torch.randint(0, len(text) - 13, (8,), generator=g)
        windows = torch.stack([text[s:s + 13] for s in starts.tolist()])
        return windows[:, :-1], windows[:, 1:]

    result = Trainer(model, TrainConfig(steps=60, lr=1e-2, warmup=5, eval_every=0, log_every=10),
                     batch).fit()
    losses = [v for _, v in result.series("train_loss")]
    assert result.status == "ok"
    assert losses[0] > 0.8 * math.log(32)  # starts near chance
    assert losses[-1] < 0.5 * losses[0]


def test_bad_configs_name_the_field() -> None:
    with pytest.raises(ConfigError) as err:
        GPTConfig(ffn="swiglue")
    assert err.value.field == "ffn" and "swiglu" in str(err.value)
    with pytest.raises(ConfigError) as err:
        GPTConfig(norm="layrnorm")
    assert err.value.field == "norm" and "layernorm" in str(err.value)
    with pytest.raises(ConfigError) as err:
        GPTConfig(n_embd=30, n_head=4)
    assert err.value.field == "n_head"
    with pytest.raises(ValueError, match="block_size"):
        GPT(GPTConfig(**TINY))(torch.zeros(1, 13, dtype=torch.long))


def test_mlp_norm_centres_each_token_before_the_activation() -> None:
    # Percentile Centering between up-projection and ReLU zeroes floor(q (m - 1)) + 1 of the
    # m inputs of every token (no learned shift): the ones below the interpolated percentile
    torch.manual_seed(0)
    config = GPTConfig(**TINY, activation="relu", mlp_norm="percentile:q=0.7", mlp_norm_bias=False)
    model = GPT(config)
    mlp = model.blocks[0].mlp
    assert mlp.norm.bias is None and mlp.norm.q == 0.7
    seen = {}
    mlp.act.register_forward_hook(lambda mod, inp, out: seen.update(x=inp[0], y=out))
    idx = torch.randint(0, TINY["vocab_size"], (3, TINY["block_size"]))
    logits, _ = model(idx)
    assert seen["x"].shape[-1] == config.hidden
    zeros = (seen["y"] == 0).sum(-1)
    assert (zeros == math.floor(0.7 * (config.hidden - 1)) + 1).all()
    # gradients reach the up-projection through the norm
    logits.sum().backward()
    assert mlp.up.weight.grad is not None and mlp.up.weight.grad.abs().sum() > 0
    with pytest.raises(ConfigError) as err:
        GPTConfig(mlp_norm="percentil:q=0.7")
    assert err.value.field == "mlp_norm"
    with pytest.raises(ConfigError) as err:
        GPTConfig(ffn="swiglu", mlp_norm="percentile:q=0.7")
    assert err.value.field == "mlp_norm" and "plain" in str(err.value)
