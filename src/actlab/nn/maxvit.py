"""MaxViT ("MaxViT: Multi-Axis Vision Transformer", Tu et al., 2022) in one readable module.

"Bug or Feature²" trains MaxViT-T (App. D.5: "a 2–2–5–2 block structure with interleaved local
and global attention") for its Accumulation Stop and squared-activation results. The layout
follows torchvision's ``maxvit_t`` (``torchvision/models/maxvit.py``), module by module, so a
``maxvit_config("maxvit-t")`` model has exactly its parameters (30,919,624 at 1,000 classes,
the ``num_params`` torchvision states for its weights):

* a stem: 3x3 stride-2 convolution, norm, activation, then a 3x3 convolution with bias;
* stages of :class:`MaxViTLayer` (the first of a stage halves the resolution), each an
  :class:`MBConv` (pre-norm, 1x1 expansion x4, depthwise 3x3, squeeze-excitation at 1/4
  of the output channels with SiLU, 1x1 projection; residual through an average-pooled 1x1
  projection when the shape changes), then window attention (block attention inside
  ``P x P`` windows) and grid attention (dilated: ``P x P`` tokens spread over the whole
  map), each a pre-norm transformer layer (relative-position-biased attention, MLP x4);
* a head: global average pool, LayerNorm, Linear, Tanh, Linear without bias.

What the experiments vary is explicit in :class:`MaxViTConfig`: ``activation`` (any actlab
spec; it replaces every GELU of the reference -- stem, MBConv and MLPs -- and nothing else,
as Table 1 of "Bug or Feature²" says of its MaxViT column: the squeeze-excitation's SiLU and
the head's Tanh stay), ``conv_norm`` (the MBConv and stem norms, BatchNorm in the reference)
and ``norm`` (the transformer layers' pre-norms, LayerNorm in the reference), each any
:func:`~actlab.nn.norms.make_norm` spec. Where we differ from torchvision, ours: BatchNorm's
momentum is PyTorch's 0.01 (torchvision passes TensorFlow's 0.99, which PyTorch reads as the
weight of the *new* batch), and the attention scale is ``head_dim ** -0.5`` where torchvision
scales keys by ``feat_dim ** -0.5`` (parameter counts are the same).

``model.blocks`` lists every :class:`MaxViTLayer` in order, so ``Probe(model,
blocks=model.blocks)`` records the stream after each, and every activation site is found by
:func:`actlab.find_activations`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from actlab.activations.spec_activation import make_activation
from actlab.errors import ConfigError, did_you_mean
from actlab.nn.norms import make_norm

__all__ = ["MAXVIT_CONFIGS", "MBConv", "MaxViT", "MaxViTConfig", "MaxViTLayer",
           "PartitionAttention", "grid_partition", "maxvit_config", "param_count",
           "relative_position_index", "small_maxvit_config", "window_departition",
           "window_partition"]

# BatchNorm as the reference's TensorFlow code (eps 1e-3; momentum 0.99 in TF's convention,
# 0.01 in PyTorch's).
REFERENCE_CONV_NORM = "batchnorm:eps=0.001:momentum=0.01"


@dataclass
class MaxViTConfig:
    """Shape and components of a :class:`MaxViT` (defaults: MaxViT-T at 224x224)."""

    image_size: int = 224
    in_channels: int = 3
    num_classes: int = 1000
    stem_channels: int = 64
    block_channels: tuple[int, ...] = (64, 128, 256, 512)
    block_layers: tuple[int, ...] = (2, 2, 5, 2)
    head_dim: int = 32
    partition_size: int = 7
    expansion_ratio: float = 4.0
    squeeze_ratio: float = 0.25
    mlp_ratio: int = 4
    stochastic_depth: float = 0.2  # the largest drop rate, reached linearly at the last layer
    activation: str = "gelu"
    conv_norm: str = REFERENCE_CONV_NORM
    norm: str = "layernorm"

    def __post_init__(self) -> None:
        self.block_channels = tuple(int(c) for c in self.block_channels)
        self.block_layers = tuple(int(n) for n in self.block_layers)
        if len(self.block_channels) != len(self.block_layers) or not self.block_layers:
            raise ConfigError("block_layers", f"one layer count per stage: got "
                                              f"{len(self.block_layers)} for "
                                              f"{len(self.block_channels)} stage widths")
        bad = [c for c in self.block_channels if c % self.head_dim]
        if bad:
            raise ConfigError("head_dim", f"must divide every stage width, not {bad}")
        if not 0.0 <= self.stochastic_depth < 1.0:
            raise ConfigError("stochastic_depth", f"must be in [0, 1), got {self.stochastic_depth}")
        sizes = self.grid_sizes()
        for stage, size in enumerate(sizes):
            if size < 1 or size % self.partition_size:
                raise ConfigError("partition_size", f"{self.partition_size} must divide the "
                                  f"feature map of every stage; stage {stage} is {size}x{size} "
                                  f"(all: {sizes}, from image_size {self.image_size})")

    def grid_sizes(self) -> list[int]:
        """The side of each stage's feature map: the stem and every stage halve it
        (3x3 convolutions of stride 2, padding 1)."""
        size = _halved(self.image_size)
        sizes = []
        for _ in self.block_channels:
            size = _halved(size)
            sizes.append(size)
        return sizes


def _halved(size: int) -> int:
    """Output side of a 3x3 convolution with stride 2 and padding 1."""
    return (size - 1) // 2 + 1


# Name -> (stem, stage widths, layers per stage, head dim, partition size, stochastic depth);
# torchvision's maxvit_t: 64, (64, 128, 256, 512), (2, 2, 5, 2), 32, 7, 0.2.
MAXVIT_CONFIGS: dict[str, dict] = {
    "maxvit-t": {"stem_channels": 64, "block_channels": (64, 128, 256, 512),
                 "block_layers": (2, 2, 5, 2), "head_dim": 32, "partition_size": 7,
                 "stochastic_depth": 0.2},
}


def maxvit_config(name: str, **overrides) -> MaxViTConfig:
    """The named configuration (``"maxvit-t"``, case-insensitive) with ``overrides``."""
    key = str(name).strip().lower()
    if key not in MAXVIT_CONFIGS:
        hint = did_you_mean(key, MAXVIT_CONFIGS, n=2, prefix="; ")
        raise ConfigError("model", f"unknown MaxViT config {name!r}{hint} "
                                   f"(valid: {', '.join(MAXVIT_CONFIGS)})")
    return replace(MaxViTConfig(**MAXVIT_CONFIGS[key]), **overrides)


# ------------------------------------------------------------------------ partitions
def window_partition(x: Tensor, p: int) -> Tensor:
    """``(B, C, H, W)`` -> ``(B, H/p * W/p, p*p, C)``: non-overlapping ``p x p`` windows,
    the tokens of each window contiguous pixels."""
    b, c, h, w = x.shape
    x = x.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 3, 5, 1)
    return x.reshape(b, (h // p) * (w // p), p * p, c)


def window_departition(x: Tensor, p: int, hp: int, wp: int) -> Tensor:
    """The inverse of :func:`window_partition` for ``hp x wp`` windows of side ``p``."""
    b, _, _, c = x.shape
    x = x.reshape(b, hp, wp, p, p, c).permute(0, 5, 1, 3, 2, 4)
    return x.reshape(b, c, hp * p, wp * p)


def grid_partition(x: Tensor, g: int) -> Tensor:
    """``(B, C, H, W)`` -> ``(B, H/g * W/g, g*g, C)``: groups of ``g x g`` tokens spaced
    ``H/g`` and ``W/g`` apart (the dilated grid of MaxViT's global attention).

    It is :func:`window_partition` into windows of side ``H/g`` with the window and token
    axes swapped, as the reference computes it.
    """
    return window_partition(x, x.shape[-2] // g).transpose(1, 2)


def relative_position_index(size: int) -> Tensor:
    """``(size², size²)`` index into a table of ``(2 size - 1)²`` relative offsets: entry
    ``[i, j]`` numbers the offset from token ``j`` to token ``i`` of a ``size x size`` window."""
    # built on the CPU whatever the default device (on meta it would import torch's
    # decompositions, seconds, for 49 numbers); the caller moves it
    steps = torch.arange(size, device="cpu")
    coords = torch.stack(torch.meshgrid(steps, steps, indexing="ij"))
    coords = coords.flatten(1)  # (2, size²)
    rel = (coords[:, :, None] - coords[:, None, :]) + (size - 1)  # in [0, 2 size - 2]
    return rel[0] * (2 * size - 1) + rel[1]


# ------------------------------------------------------------------------ modules
class StochasticDepth(nn.Module):
    """Drop the whole residual branch of a sample with probability ``p`` in training,
    scaling the kept ones by ``1 / (1 - p)`` (torchvision's ``mode="row"``)."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = float(p)

    def forward(self, x: Tensor) -> Tensor:
        """``x`` with dropped rows zeroed (identity in eval mode or at ``p = 0``)."""
        if not self.training or self.p == 0.0:
            return x
        keep = torch.empty((x.shape[0],) + (1,) * (x.dim() - 1), dtype=x.dtype, device=x.device)
        return x * keep.bernoulli_(1.0 - self.p).div_(1.0 - self.p)


class SqueezeExcitation(nn.Module):
    """``x * sigmoid(fc2(silu(fc1(mean_hw(x)))))`` with 1x1 convolutions (with biases)."""

    def __init__(self, channels: int, squeeze: int) -> None:
        super().__init__()
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, channels, 1)

    def forward(self, x: Tensor) -> Tensor:
        """Rescale each channel by its excitation."""
        scale = self.fc2(F.silu(self.fc1(x.mean(dim=(2, 3), keepdim=True))))
        return x * torch.sigmoid(scale)


class MBConv(nn.Module):
    """Mobile inverted bottleneck with squeeze-excitation, pre-normed, residual.

    ``res(x) + drop(conv_c(se(act(norm(dw(act(norm(conv_a(norm(x))))))))))``, where the
    residual ``res`` is the identity, or (stride 2 / new width) an average pool and a 1x1
    convolution with bias.
    """

    def __init__(self, in_channels: int, out_channels: int, stride: int, config: MaxViTConfig,
                 drop: float) -> None:
        super().__init__()
        mid = int(out_channels * config.expansion_ratio)
        if stride != 1 or in_channels != out_channels:
            pool = [nn.AvgPool2d(3, stride=stride, padding=1)] if stride == 2 else []
            self.proj: nn.Module = nn.Sequential(*pool, nn.Conv2d(in_channels, out_channels, 1))
        else:
            self.proj = nn.Identity()

        def norm(c: int) -> nn.Module:
            return make_norm(config.conv_norm, c, channels_first=True)

        self.pre_norm = norm(in_channels)
        self.conv_a = nn.Conv2d(in_channels, mid, 1, bias=False)
        self.norm_a = norm(mid)
        self.act_a = make_activation(config.activation)
        self.conv_b = nn.Conv2d(mid, mid, 3, stride=stride, padding=1, groups=mid, bias=False)
        self.norm_b = norm(mid)
        self.act_b = make_activation(config.activation)
        self.se = SqueezeExcitation(mid, int(out_channels * config.squeeze_ratio))
        self.conv_c = nn.Conv2d(mid, out_channels, 1)
        self.drop = StochasticDepth(drop)

    def forward(self, x: Tensor) -> Tensor:
        """``(B, C_in, H, W)`` -> ``(B, C_out, H / stride, W / stride)``."""
        h = self.act_a(self.norm_a(self.conv_a(self.pre_norm(x))))
        h = self.act_b(self.norm_b(self.conv_b(h)))
        return self.proj(x) + self.drop(self.conv_c(self.se(h)))


class RelativeAttention(nn.Module):
    """Multi-head self-attention inside each group of ``(B, G, P, D)`` tokens, with a learned
    bias per head and relative offset of the ``P = size²`` tokens of a ``size x size`` window."""

    def __init__(self, dim: int, head_dim: int, size: int) -> None:
        super().__init__()
        self.heads, self.head_dim = dim // head_dim, head_dim
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.bias_table = nn.Parameter(torch.empty((2 * size - 1) ** 2, self.heads))
        self.register_buffer("index", relative_position_index(size).to(self.bias_table.device),
                             persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        """Attend within every group."""
        b, g, p, d = x.shape
        q, k, v = (self.qkv(x).reshape(b, g, p, 3, self.heads, self.head_dim)
                   .permute(3, 0, 1, 4, 2, 5))  # each (B, G, heads, P, head_dim)
        bias = self.bias_table[self.index.reshape(-1)].reshape(p, p, self.heads).permute(2, 0, 1)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=bias.to(q.dtype))
        return self.proj(y.transpose(2, 3).reshape(b, g, p, d))


class PartitionAttention(nn.Module):
    """Window (``kind="window"``) or grid attention, then an MLP, both pre-norm residual,
    on ``(B, C, H, W)`` maps cut into groups of ``partition_size²`` tokens."""

    def __init__(self, dim: int, kind: str, config: MaxViTConfig, drop: float) -> None:
        super().__init__()
        if kind not in ("window", "grid"):
            raise ValueError(f"kind must be 'window' or 'grid', got {kind!r}")
        self.kind, self.p = kind, config.partition_size
        self.norm1 = make_norm(config.norm, dim)
        self.attn = RelativeAttention(dim, config.head_dim, config.partition_size)
        self.norm2 = make_norm(config.norm, dim)
        hidden = dim * config.mlp_ratio
        self.up = nn.Linear(dim, hidden)
        self.act = make_activation(config.activation)
        self.down = nn.Linear(hidden, dim)
        self.drop = StochasticDepth(drop)

    def forward(self, x: Tensor) -> Tensor:
        """Update every group's tokens and put the map back together."""
        _, _, h, w = x.shape
        if h % self.p or w % self.p:
            raise ValueError(f"a {h}x{w} map does not split into {self.p}x{self.p} partitions")
        t = window_partition(x, self.p) if self.kind == "window" else grid_partition(x, self.p)
        t = t + self.drop(self.attn(self.norm1(t)))
        t = t + self.drop(self.down(self.act(self.up(self.norm2(t)))))
        if self.kind == "window":
            return window_departition(t, self.p, h // self.p, w // self.p)
        return window_departition(t.transpose(1, 2), h // self.p, self.p, self.p)


class MaxViTLayer(nn.Module):
    """MBConv, then window attention, then grid attention."""

    def __init__(self, in_channels: int, out_channels: int, stride: int, config: MaxViTConfig,
                 drop: float) -> None:
        super().__init__()
        self.mbconv = MBConv(in_channels, out_channels, stride, config, drop)
        self.window = PartitionAttention(out_channels, "window", config, drop)
        self.grid = PartitionAttention(out_channels, "grid", config, drop)

    def forward(self, x: Tensor) -> Tensor:
        """``(B, C_in, H, W)`` -> ``(B, C_out, H / stride, W / stride)``."""
        return self.grid(self.window(self.mbconv(x)))


class MaxViT(nn.Module):
    """MaxViT for ``(B, in_channels, image_size, image_size)`` images (module docstring).

    Weights are drawn as the reference's ``_init_weights``: convolutions and linear layers
    normal with std 0.02 and zero biases, norms at 1 and 0, the relative-position tables
    truncated normal with std 0.02; from torch's global generator (seed it, or build the
    model inside :func:`torch.random.fork_rng`).
    """

    def __init__(self, config: MaxViTConfig | None = None) -> None:
        super().__init__()
        self.config = config = config or MaxViTConfig()
        stem = config.stem_channels
        self.stem_conv = nn.Conv2d(config.in_channels, stem, 3, stride=2, padding=1, bias=False)
        self.stem_norm = make_norm(config.conv_norm, stem, channels_first=True)
        self.stem_act = make_activation(config.activation)
        self.stem_out = nn.Conv2d(stem, stem, 3, padding=1)
        total = sum(config.block_layers)
        drops = [config.stochastic_depth * i / max(1, total - 1) for i in range(total)]
        layers, width = [], stem
        for channels, count in zip(config.block_channels, config.block_layers):
            for i in range(count):
                layers.append(MaxViTLayer(width, channels, 2 if i == 0 else 1, config,
                                          drops[len(layers)]))
                width = channels
        self.blocks = nn.ModuleList(layers)
        self.head_norm = nn.LayerNorm(width)
        self.head_hidden = nn.Linear(width, width)
        self.head = nn.Linear(width, config.num_classes, bias=False)
        self._init_weights()

    def _init_weights(self) -> None:
        if self.head.weight.is_meta:  # no values to draw (and drawing on meta imports dynamo)
            return
        for module in self.modules():
            if isinstance(module, (nn.Conv2d, nn.Linear)):
                nn.init.normal_(module.weight, std=0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, RelativeAttention):
                nn.init.trunc_normal_(module.bias_table, std=0.02)

    def forward(self, x: Tensor) -> Tensor:
        """Class logits ``(B, num_classes)``."""
        size = self.config.image_size
        if x.dim() != 4 or x.shape[-2:] != (size, size):
            raise ValueError(f"expected (N, C, {size}, {size}) images, got {tuple(x.shape)}")
        h = self.stem_out(self.stem_act(self.stem_norm(self.stem_conv(x))))
        for block in self.blocks:
            h = block(h)
        pooled = self.head_norm(h.mean(dim=(2, 3)))
        return self.head(torch.tanh(self.head_hidden(pooled)))


def small_maxvit_config(image_size: int, in_channels: int, num_classes: int,
                        **overrides) -> MaxViTConfig:
    """A CPU-scale MaxViT for small images (ours): stem 16, stages of width 16 and 32 with one
    layer each (one stage of width 32 where the map is too small for two, as 8x8 digits),
    head dim 8, partition 2, no stochastic depth."""
    two_stages = _halved(_halved(_halved(image_size))) % 2 == 0
    base = MaxViTConfig(image_size=image_size, in_channels=in_channels, num_classes=num_classes,
                        stem_channels=16, block_channels=(16, 32) if two_stages else (32,),
                        block_layers=(1, 1) if two_stages else (1,), head_dim=8,
                        partition_size=2, stochastic_depth=0.0)
    return replace(base, **overrides) if overrides else base


def param_count(config: MaxViTConfig) -> int:
    """Parameters of a :class:`MaxViT` of ``config``, counted on the meta device (no memory)."""
    with torch.device("meta"):
        model = MaxViT(config)
    return sum(p.numel() for p in model.parameters())

