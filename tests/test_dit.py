"""The Diffusion Transformer: adaLN-Zero, shapes, reference parameter/FLOP counts, dense
block math and gradients, component specs, label dropout, seeding."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from actlab.errors import ConfigError
from actlab.nn.dit import (
    DIT_CONFIGS,
    DiT,
    DiTConfig,
    LabelEmbedder,
    dit_config,
    timestep_embedding,
    unpatchify,
)
from actlab.nn.ffn import FFN, GatedFFN, matched_width
from actlab.nn.norms import PercentileLayerNorm
from actlab.surgery import find_activations

TINY = dict(input_size=8, patch_size=2, in_channels=3, hidden_size=16, depth=2, num_heads=4,
            num_classes=10)

# Read off the reference models.py (DiT_S_2 ... DiT_XL_8): (depth, hidden_size, num_heads).
REFERENCE_SIZES = {"S": (12, 384, 6), "B": (12, 768, 12), "L": (24, 1024, 16),
                   "XL": (28, 1152, 16)}


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _inputs(config: DiTConfig, n: int = 3, seed: int = 0, dtype=torch.float32):
    g = _gen(seed)
    x = torch.randn(n, config.in_channels, config.input_size, config.input_size, generator=g,
                    dtype=dtype)
    t = torch.randint(0, 1000, (n,), generator=g).to(dtype)
    y = torch.randint(0, config.num_classes, (n,), generator=g)
    return x, t, y


@torch.no_grad()
def _perturb(model: nn.Module, seed: int = 1, scale: float = 0.3) -> None:
    # Move every weight off its initial value, zero-initialised ones included.
    g = _gen(seed)
    for p in model.parameters():
        p.add_(torch.randn(p.shape, generator=g, dtype=p.dtype) * scale)


def reference_param_count(depth: int, hidden: int, patch: int, *, input_size: int = 32,
                          in_channels: int = 4, num_classes: int = 1000, learn_sigma: bool = True,
                          class_dropout_prob: float = 0.1, bias: bool = True) -> int:
    """Parameters of the reference models.py, counted from its layers (bias=True there)."""
    d, b = hidden, int(bias)
    m = int(hidden * 4.0)
    out = 2 * in_channels if learn_sigma else in_channels
    tokens = (input_size // patch) ** 2
    x_embedder = in_channels * patch * patch * d + b * d  # timm PatchEmbed conv
    t_embedder = (256 * d + b * d) + (d * d + b * d)  # Linear(256, D), SiLU, Linear(D, D)
    y_embedder = (num_classes + int(class_dropout_prob > 0)) * d
    qkv, proj = 3 * d * d + b * 3 * d, d * d + b * d
    fc1, fc2 = d * m + b * m, m * d + b * d
    ada = d * 6 * d + b * 6 * d
    final = (d * 2 * d + b * 2 * d) + (d * patch * patch * out + b * patch * patch * out)
    pos_embed = tokens * d  # an nn.Parameter (requires_grad=False) in the reference
    return x_embedder + t_embedder + y_embedder + depth * (qkv + proj + fc1 + fc2 + ada) \
        + final + pos_embed


# -- adaLN-Zero at initialisation ------------------------------------------------------------

def test_output_is_exactly_zero_at_init_and_only_the_final_linear_gets_gradient() -> None:
    config = DiTConfig(**TINY)
    model = DiT(config, seed=0)
    x, t, y = _inputs(config)
    for training in (True, False):
        model.train(training)
        out = model(x, t, y, generator=_gen(5))
        assert out.shape == (3, 2 * config.in_channels, 8, 8)
        assert torch.equal(out, torch.zeros_like(out))
    # each block is the identity at init
    tokens = torch.randn(3, config.num_patches, 16, generator=_gen(2))
    cond = torch.randn(3, 16, generator=_gen(3))
    assert torch.equal(model.blocks[0](tokens, cond), tokens)
    # d out / d theta is zero except through the zero final linear layer
    model.eval()
    (model(x, t, y) * torch.randn(3, 6, 8, 8, generator=_gen(4))).sum().backward()
    for name, param in model.named_parameters():
        nonzero = bool(param.grad is not None and param.grad.abs().sum() > 0)
        assert nonzero == name.startswith("final_layer.linear"), name


# -- shapes ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", DIT_CONFIGS)
def test_named_configs_on_meta(name: str) -> None:
    size, patch = name.split("/")
    depth, hidden, heads = REFERENCE_SIZES[size]
    config = dit_config(f"DiT-{name.lower()}")
    assert (config.depth, config.hidden_size, config.num_heads, config.patch_size) == (
        depth, hidden, heads, int(patch))
    assert config == dit_config(name) == dit_config(f"dit-{name}")
    assert (config.input_size, config.in_channels, config.num_classes) == (32, 4, 1000)
    assert config.num_patches == (32 // int(patch)) ** 2
    assert config.out_channels == 8 and dit_config(name, learn_sigma=False).out_channels == 4
    with torch.device("meta"):
        model = DiT(config, seed=0)
        out = model(torch.empty(2, 4, 32, 32), torch.empty(2), torch.zeros(2, dtype=torch.long))
    assert out.shape == (2, 8, 32, 32) and out.is_meta
    assert len(model.blocks) == depth and isinstance(model.blocks, nn.ModuleList)
    assert model.final_layer.linear.out_features == int(patch) ** 2 * 8


def test_tiny_forward_backward_on_cpu() -> None:
    config = DiTConfig(**TINY)
    model = DiT(config, seed=0)
    _perturb(model)
    x, t, y = _inputs(config)
    out = model(x, t, y, generator=_gen(7))
    assert out.shape == (3, 6, 8, 8) and torch.isfinite(out).all()
    F.mse_loss(out, torch.randn(out.shape, generator=_gen(8))).backward()
    for name, param in model.named_parameters():
        assert param.grad is not None and torch.isfinite(param.grad).all(), name
        assert param.grad.abs().sum() > 0, name
    with pytest.raises(ValueError, match="expected"):
        model(x[:, :2], t, y)


# -- counts against the reference ------------------------------------------------------------

@pytest.mark.parametrize("name", DIT_CONFIGS)
def test_param_counts_match_the_reference(name: str) -> None:
    size, patch = name.split("/")
    depth, hidden, _ = REFERENCE_SIZES[size]
    for learn_sigma in (True, False):
        config = dit_config(name, learn_sigma=learn_sigma)
        with torch.device("meta"):
            model = DiT(config)
        # ours keeps the fixed position embedding as a buffer: add it back for the reference
        assert model.pos_embed.numel() == config.num_patches * hidden
        assert "pos_embed" not in dict(model.named_parameters())
        ours = model.num_params() + model.pos_embed.numel()
        assert ours == reference_param_count(depth, hidden, int(patch), learn_sigma=learn_sigma)
    with torch.device("meta"):
        model = DiT(dit_config(name, bias=False))
    assert model.num_params() + model.pos_embed.numel() == reference_param_count(
        depth, hidden, int(patch), bias=False)


def _dense_sdpa(q, k, v, *args, **kwargs):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return F.softmax(scores, dim=-1) @ v


@pytest.mark.parametrize("ffn, bias", [("plain", True), ("plain", False), ("swiglu", True),
                                       ("geglu", False)])
def test_flops_match_the_flop_counter_plus_bias_adds(monkeypatch, ffn: str, bias: bool) -> None:
    # attention as explicit matmuls so the counter sees them (it skips the CPU SDPA kernel)
    monkeypatch.setattr(F, "scaled_dot_product_attention", _dense_sdpa)
    config = DiTConfig(**TINY, ffn=ffn, bias=bias)
    model = DiT(config, seed=0).eval()
    x, t, y = _inputs(config, n=2)
    bias_adds = []

    def count(module, inputs, output):
        if module.bias is not None:
            bias_adds.append(output.numel())  # one add per output element

    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Conv2d)):
            module.register_forward_hook(count)
    with FlopCounterMode(display=False) as counter:
        model(x, t, y)
    # the ffn convention also counts the gating product, one multiply per gated unit
    gating = config.depth * config.num_patches * config.mlp_hidden if config.gated else 0
    assert counter.get_total_flops() + sum(bias_adds) + 2 * gating == 2 * model.flops_per_image()
    assert (sum(bias_adds) > 0) == bias


def test_flops_match_the_published_gflops() -> None:
    # README of facebookresearch/DiT: DiT-XL/2 "119" Gflops at 256x256 and "525" at 512x512
    # (latents 32 and 64); the paper's Gflops count a multiply-add once, ours twice.
    for input_size, gflops in ((32, 119), (64, 525)):
        with torch.device("meta"):
            model = DiT(dit_config("XL/2", input_size=input_size))
        assert round(model.flops_per_image() / 2e9) == gflops


# -- block math ------------------------------------------------------------------------------

def _dense_layernorm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps)


def _gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def _dense_block(block, x: torch.Tensor, c: torch.Tensor, heads: int) -> torch.Tensor:
    n, length, d = x.shape
    silu_c = c * torch.sigmoid(c)
    mod = silu_c @ block.adaLN_modulation.weight.T + block.adaLN_modulation.bias
    shift1, scale1, gate1, shift2, scale2, gate2 = (mod[:, i * d:(i + 1) * d, None].transpose(1, 2)
                                                    for i in range(6))
    h = _dense_layernorm(x) * (1 + scale1) + shift1
    qkv = h @ block.attn.qkv.weight.T + block.attn.qkv.bias
    hd = d // heads
    q, k, v = (qkv[..., s * d:(s + 1) * d].reshape(n, length, heads, hd).transpose(1, 2)
               for s in range(3))
    attn = F.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd), dim=-1) @ v
    attn = attn.transpose(1, 2).reshape(n, length, d) @ block.attn.proj.weight.T + block.attn.proj.bias
    x = x + gate1 * attn
    h = _dense_layernorm(x) * (1 + scale2) + shift2
    up = _gelu_tanh(h @ block.mlp.up.weight.T + block.mlp.up.bias)
    return x + gate2 * (up @ block.mlp.down.weight.T + block.mlp.down.bias)


def test_block_matches_a_dense_reference_with_gradients() -> None:
    config = DiTConfig(**TINY)
    model = DiT(config, seed=0).double()
    _perturb(model)
    block = model.blocks[1]
    x = torch.randn(2, 5, 16, generator=_gen(3), dtype=torch.float64, requires_grad=True)
    c = torch.randn(2, 16, generator=_gen(4), dtype=torch.float64, requires_grad=True)
    weights = torch.randn(2, 5, 16, generator=_gen(5), dtype=torch.float64)
    params = [x, c, *block.parameters()]
    ours = block(x, c)
    dense = _dense_block(block, x, c, config.num_heads)
    torch.testing.assert_close(ours, dense)
    grads = torch.autograd.grad((ours * weights).sum(), params)
    dense_grads = torch.autograd.grad((dense * weights).sum(), params)
    for g, r in zip(grads, dense_grads, strict=True):
        torch.testing.assert_close(g, r)


def test_whole_model_gradcheck_float64() -> None:
    config = DiTConfig(input_size=4, patch_size=2, in_channels=2, hidden_size=8, depth=1,
                       num_heads=2, num_classes=3)
    model = DiT(config, seed=0).double().eval()
    _perturb(model)
    x, t, y = _inputs(config, n=1, dtype=torch.float64)
    x.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda inp: model(inp, t, y), (x,))


def test_patch_embedding_and_unpatchify_against_loops() -> None:
    config = DiTConfig(**TINY)
    model = DiT(config, seed=0)
    _perturb(model)
    x, _, _ = _inputs(config, n=2)
    p, side = 2, 4
    tokens = model.x_embedder(x)
    weight = model.x_embedder.proj.weight.reshape(16, -1)
    for k in range(side * side):
        r, col = divmod(k, side)  # row-major token order
        patch = x[:, :, r * p:(r + 1) * p, col * p:(col + 1) * p].reshape(2, -1)
        torch.testing.assert_close(tokens[:, k], patch @ weight.T + model.x_embedder.proj.bias)
    values = torch.randn(2, side * side, p * p * 6, generator=_gen(1))
    image = unpatchify(values, p, 6)
    assert image.shape == (2, 6, 8, 8)
    for k in range(side * side):
        r, col = divmod(k, side)
        for a in range(p):
            for b in range(p):
                for ch in range(6):
                    assert torch.equal(image[:, ch, r * p + a, col * p + b],
                                       values[:, k, (a * p + b) * 6 + ch])


def _mae_1d(dim: int, pos: np.ndarray) -> np.ndarray:
    omega = 1.0 / 10000 ** (np.arange(dim // 2, dtype=np.float64) / (dim / 2.0))
    out = np.outer(pos.reshape(-1), omega)
    return np.concatenate([np.sin(out), np.cos(out)], axis=1)


def test_fixed_position_embedding_is_the_mae_sincos_buffer() -> None:
    config = DiTConfig(**TINY)
    model = DiT(config, seed=0)
    grid = np.stack(np.meshgrid(np.arange(4, dtype=np.float32), np.arange(4, dtype=np.float32)))
    expected = np.concatenate([_mae_1d(8, grid[0]), _mae_1d(8, grid[1])], axis=1)
    torch.testing.assert_close(model.pos_embed[0], torch.from_numpy(expected).float())
    assert "pos_embed" in dict(model.named_buffers())
    assert not model.pos_embed.requires_grad


def test_timestep_embedding_closed_form() -> None:
    t = torch.tensor([0.0, 1.0, 17.5, 999.0])
    emb = timestep_embedding(t, 256)
    i = torch.arange(128, dtype=torch.float64)
    args = t.double()[:, None] * torch.pow(10000.0, -i / 128)[None]
    torch.testing.assert_close(emb.double(), torch.cat([args.cos(), args.sin()], 1),
                               rtol=0, atol=1e-4)  # float32 features at arguments up to 999
    assert timestep_embedding(t, 7).shape == (4, 7) and torch.all(timestep_embedding(t, 7)[:, 6] == 0)


# -- components and specs --------------------------------------------------------------------

def test_bias_false_leaves_no_bias() -> None:
    model = DiT(DiTConfig(**TINY, bias=False), seed=0)
    layers = [m for m in model.modules() if isinstance(m, (nn.Linear, nn.Conv2d))]
    assert len(layers) == 1 + 2 + 2 * (2 + 2 + 1) + 2  # patch, timestep MLP, blocks, final
    assert all(m.bias is None for m in layers)
    assert not any(name.endswith("bias") for name, _ in model.named_parameters())


def test_block_norms_have_no_affine_and_reference_eps() -> None:
    model = DiT(DiTConfig(**TINY), seed=0)
    for norm in (model.blocks[0].norm1, model.blocks[0].norm2, model.final_layer.norm_final):
        assert isinstance(norm, nn.LayerNorm) and not norm.elementwise_affine
        assert norm.eps == 1e-6
    assert DiT(DiTConfig(**TINY, norm="layernorm:eps=1e-4")).blocks[0].norm1.eps == 1e-4


@pytest.mark.parametrize("spec", ["gelu:topk=0.1", "relu", "gelu:tanh"])
def test_activation_specs_are_the_only_activation_sites(spec: str) -> None:
    config = DiTConfig(**TINY, activation=spec)
    model = DiT(config, seed=0)
    sites = find_activations(model)
    assert list(sites) == [f"blocks.{i}.mlp.act" for i in range(2)]
    assert sites["blocks.0.mlp.act"] is model.blocks[0].mlp.act
    _perturb(model)
    out = model(*_inputs(config))
    out.sum().backward()
    assert torch.isfinite(out).all()


def test_default_activation_is_the_reference_tanh_gelu() -> None:
    act = DiT(DiTConfig(**TINY), seed=0).blocks[0].mlp.act
    z = torch.linspace(-6, 6, 101)
    torch.testing.assert_close(act(z), nn.GELU(approximate="tanh")(z))


def test_gated_ffn_is_parameter_matched() -> None:
    plain = DiT(DiTConfig(**TINY), seed=0)
    gated = DiT(DiTConfig(**TINY, ffn="swiglu"), seed=0)
    assert isinstance(plain.blocks[0].mlp, FFN) and isinstance(gated.blocks[0].mlp, GatedFFN)
    assert gated.config.mlp_hidden == matched_width(16, 64, bias=True)
    count = [sum(p.numel() for p in m.blocks[0].mlp.parameters()) for m in (plain, gated)]
    # one unit of gated width costs 3 d + 2 parameters: rounding is within half of that
    assert abs(count[0] - count[1]) <= (3 * 16 + 2) / 2


def test_percentile_norm_in_the_blocks() -> None:
    config = DiTConfig(**TINY, norm="percentile:q=0.7")
    model = DiT(config, seed=0)
    norm = model.blocks[0].norm1
    assert isinstance(norm, PercentileLayerNorm) and norm.q == 0.7
    assert norm.weight is None and norm.bias is None
    _perturb(model)
    out = model(*_inputs(config), generator=_gen(1))
    out.square().mean().backward()
    assert torch.isfinite(out).all() and int(norm.num_batches_tracked) == 1


def test_bad_names_suggest_the_closest_valid_ones() -> None:
    with pytest.raises(ConfigError, match="XL/2"):
        dit_config("DiT-XL/3")
    with pytest.raises(ConfigError, match="B/2"):
        dit_config("b-2")
    with pytest.raises(ConfigError, match="swiglu"):
        DiTConfig(**TINY, ffn="swiglo")
    with pytest.raises(ConfigError, match="layernorm"):
        DiTConfig(**TINY, norm="layernrom")
    with pytest.raises(ConfigError, match="gelu"):
        DiTConfig(**TINY, activation="gelux")


@pytest.mark.parametrize("field, overrides", [
    ("patch_size", dict(input_size=10, patch_size=4)),
    ("num_heads", dict(hidden_size=24, num_heads=5)),
    ("hidden_size", dict(hidden_size=18, num_heads=3)),
    ("depth", dict(depth=0)),
    ("class_dropout_prob", dict(class_dropout_prob=1.0)),
    ("class_dropout_prob", dict(class_dropout_prob=-0.1)),
    ("mlp_ratio", dict(mlp_ratio=0.0)),
])
def test_config_validation(field: str, overrides: dict) -> None:
    with pytest.raises(ConfigError) as info:
        DiTConfig(**{**TINY, **overrides})
    assert info.value.field == field


# -- label dropout and seeding ---------------------------------------------------------------

def test_force_drop_ids_map_to_the_null_class() -> None:
    embedder = LabelEmbedder(10, 4, 0.1)
    assert embedder.embedding_table.num_embeddings == 11
    labels = torch.tensor([3, 7, 1, 9])
    dropped = embedder.token_drop(labels, torch.tensor([1, 0, 1, 0]))
    assert dropped.tolist() == [10, 7, 10, 9]
    for train in (True, False):
        emb = embedder(labels, train, force_drop_ids=torch.tensor([1, 0, 1, 0]))
        assert torch.equal(emb[0], embedder.embedding_table.weight[10])
        assert torch.equal(emb[1], embedder.embedding_table.weight[7])
    with pytest.raises(ValueError, match="null class"):
        LabelEmbedder(10, 4, 0.0).token_drop(labels, torch.ones(4))
    assert LabelEmbedder(10, 4, 0.0).embedding_table.num_embeddings == 10

    config = DiTConfig(**TINY)
    model = DiT(config, seed=0).eval()
    _perturb(model)
    x, t, y = _inputs(config)
    everything = torch.ones(3, dtype=torch.long)
    unconditional = model(x, t, y, force_drop_ids=everything)
    torch.testing.assert_close(unconditional, model(x, t, (y + 1) % 10, force_drop_ids=everything),
                               rtol=0, atol=0)
    torch.testing.assert_close(unconditional, model(x, t, torch.full_like(y, 10)), rtol=0, atol=0)
    assert not torch.equal(unconditional, model(x, t, y))


def test_training_label_dropout_is_deterministic_with_a_generator() -> None:
    embedder = LabelEmbedder(10, 4, 0.5)
    labels = torch.arange(10).repeat(20)
    state = torch.get_rng_state()
    first = embedder.token_drop(labels, generator=_gen(3))
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(first, embedder.token_drop(labels, generator=_gen(3)))
    kept = first != 10
    assert torch.equal(first[kept], labels[kept]) and 0 < int(kept.sum()) < labels.numel()
    # eval mode without force_drop_ids never drops
    assert torch.equal(embedder(labels, False), embedder.embedding_table(labels))


def test_same_seed_same_weights_and_global_rng_untouched() -> None:
    config = DiTConfig(**TINY, bias=True)
    state = torch.get_rng_state()
    a, b, c = DiT(config, seed=3), DiT(config, seed=3), DiT(config, seed=4)
    assert torch.equal(torch.get_rng_state(), state)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not torch.equal(sa["blocks.0.attn.qkv.weight"], sc["blocks.0.attn.qkv.weight"])


def test_reference_initialisation() -> None:
    model = DiT(DiTConfig(**TINY), seed=0)
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Conv2d)):
            assert module.bias is None or torch.equal(module.bias, torch.zeros_like(module.bias))
    zeroed = [b.adaLN_modulation.weight for b in model.blocks]
    zeroed += [model.final_layer.adaLN_modulation.weight, model.final_layer.linear.weight]
    assert all(torch.equal(w, torch.zeros_like(w)) for w in zeroed)
    # xavier-uniform: |w| <= sqrt(6 / (fan_in + fan_out)); the conv as a (D, C p p) matrix
    for weight, fan_in, fan_out in ((model.x_embedder.proj.weight, 3 * 2 * 2, 16),
                                    (model.blocks[0].attn.qkv.weight, 16, 48),
                                    (model.blocks[0].mlp.up.weight, 16, 64)):
        bound = math.sqrt(6 / (fan_in + fan_out))
        assert weight.abs().max() <= bound and weight.abs().max() > bound / 2
    # normal(0, 0.02): the sample std of n values has relative s.e. 1/sqrt(2n); allow 5 s.e.
    for weight in (model.y_embedder.embedding_table.weight, model.t_embedder.fc1.weight,
                   model.t_embedder.fc2.weight):
        assert abs(weight.std().item() / 0.02 - 1) < 5 / math.sqrt(2 * weight.numel())
