"""A Diffusion Transformer (DiT) in one readable module, after the reference ``models.py`` of
"Scalable Diffusion Models with Transformers" (Peebles & Xie 2023).

The input ``x`` (N, C, H, W) (an image or a VAE latent) is cut into p x p patches by a conv
with kernel = stride = p, each patch becomes a token, and a fixed 2-D sin-cos position
embedding is added. The timestep ``t`` (sinusoidal features, then an MLP) and the class
label ``y`` (an embedding table with a null class for classifier-free guidance) are summed
into one conditioning vector ``c``. Each :class:`DiTBlock` uses adaLN-Zero (paper Sec. 3.2):
``SiLU(c)`` goes through a linear layer giving shift, scale and gate for the attention and
for the MLP, ``x = x + gate * f(norm(x) * (1 + scale) + shift)``, with that linear layer
zero-initialised so that every block starts as the identity. The final layer is
adaLN-modulated too and, zero-initialised, makes the whole network output exactly zero
at initialisation. The output (N, out_channels, H, W) holds the noise prediction
(the first ``in_channels``) and, with ``learn_sigma``, the variance interpolation values
(the remaining ``in_channels``).

What the experiments vary is explicit in :class:`DiTConfig`, as in :mod:`actlab.nn.gpt`:

* ``activation``: the MLP activation, any actlab spec string; the default ``"gelu:tanh"`` is
  the reference's ``nn.GELU(approximate="tanh")``; Top-K sparsity is ``"gelu:topk=0.1"``;
* ``ffn``: ``"plain"`` or a gated kind ``"glu" | "reglu" | "geglu" | "swiglu"`` at the
  parameter-matched width of :func:`~actlab.nn.ffn.matched_width`;
* ``norm``: the two norms of every block and the final norm, any
  :func:`~actlab.nn.norms.make_norm` spec (percentile norms included). They never have a
  learned affine map (the adaLN modulation supplies scale and shift), and their ``eps`` is
  the reference's 1e-6 unless the spec sets one;
* ``bias=False``: no bias in any linear layer ("Bug or Feature²" App. D.4: "All linear
  layers omit bias terms."). Our choice: the patch-embedding conv follows the flag too,
  since it is a linear map of flattened patches.

The activation sites are exactly the block MLPs: ``model.blocks[i].mlp.act`` (found by
:func:`actlab.find_activations`). The SiLUs of the conditioning path (timestep MLP, adaLN
inputs) are part of the conditioning and applied as functions, so probes and activation
surgery do not reach them (our choice; the reference uses ``nn.SiLU`` modules there).

Classifier-free guidance is not part of the model; a sampler runs the conditional and the
null-class pass. The reference ``forward_with_cfg`` guides only the first three output
channels "for exact reproducibility reasons" (its comment); actlab's sampler guides all
noise channels (the first ``in_channels``) and keeps the variance channels of the
conditional pass.

Module names follow the reference where they can (``x_embedder.proj``,
``y_embedder.embedding_table``, ``blocks.i.attn.qkv``, ``final_layer.linear`` ...); the MLP
is actlab's :class:`~actlab.nn.ffn.FFN` (``mlp.up``, ``mlp.down``) and the
adaLN linear layers are ``adaLN_modulation`` themselves (no ``nn.Sequential``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from actlab.errors import ConfigError, did_you_mean
from actlab.nn.ffn import (
    FFN,
    GATE_KINDS,
    GatedFFN,
    checked_block_parts,
    ffn_flops_per_token,
    matched_width,
)
from actlab.nn.norm_spec import parse_norm
from actlab.nn.norms import make_norm

__all__ = ["DIT_CONFIGS", "DiT", "DiTBlock", "DiTConfig", "FinalLayer", "LabelEmbedder",
           "PatchEmbed", "TimestepEmbedder", "dit_config", "modulate", "sincos_pos_embed_2d",
           "timestep_embedding", "unpatchify"]

FREQUENCY_EMBEDDING_SIZE = 256  # sinusoidal timestep features, as the reference
NORM_EPS = 1e-6  # the reference's LayerNorm eps

# (depth, hidden_size, num_heads) of the reference's model sizes (models.py, DiT_*_* configs).
_SIZES: dict[str, tuple[int, int, int]] = {"S": (12, 384, 6), "B": (12, 768, 12),
                                           "L": (24, 1024, 16), "XL": (28, 1152, 16)}
DIT_CONFIGS: tuple[str, ...] = tuple(f"{size}/{p}" for size in _SIZES for p in (2, 4, 8))


@dataclass
class DiTConfig:
    """Shape and components of a :class:`DiT` (defaults: the reference's DiT arguments).

    The plain MLP width is ``int(hidden_size * mlp_ratio)`` as in the reference; gated FFNs
    get the parameter-matched width ``matched_width(hidden_size, that, bias=bias)``. The
    label table has a null-class row (id ``num_classes``) only when
    ``class_dropout_prob > 0``, as in the reference.
    """

    input_size: int = 32
    patch_size: int = 2
    in_channels: int = 4
    hidden_size: int = 1152
    depth: int = 28
    num_heads: int = 16
    mlp_ratio: float = 4.0
    class_dropout_prob: float = 0.1
    num_classes: int = 1000
    learn_sigma: bool = True
    activation: str = "gelu:tanh"
    ffn: str = "plain"
    norm: str = "layernorm"
    bias: bool = True

    def __post_init__(self) -> None:
        for name in ("input_size", "patch_size", "in_channels", "hidden_size", "depth",
                     "num_heads", "num_classes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(name, f"must be a positive integer, got {value!r}")
        if self.input_size % self.patch_size:
            raise ConfigError("patch_size", f"must divide input_size={self.input_size}, "
                                            f"got {self.patch_size}")
        if self.hidden_size % self.num_heads:
            raise ConfigError("num_heads", f"must divide hidden_size={self.hidden_size}, "
                                           f"got {self.num_heads}")
        if self.hidden_size % 4:
            # half the channels encode each axis with sin and cos
            raise ConfigError("hidden_size", f"must be a multiple of 4 for the 2-D sin-cos "
                                             f"position embedding, got {self.hidden_size}")
        if not self.mlp_ratio > 0 or int(self.hidden_size * self.mlp_ratio) < 1:
            raise ConfigError("mlp_ratio", f"must give an MLP width >= 1, got {self.mlp_ratio}")
        if not 0.0 <= self.class_dropout_prob < 1.0:
            raise ConfigError("class_dropout_prob",
                              f"must be in [0, 1), got {self.class_dropout_prob}")
        self.ffn = checked_block_parts(self.ffn, self.norm, self.activation)

    @property
    def gated(self) -> bool:
        """Whether the FFN is a gated one."""
        return self.ffn != "plain"

    @property
    def plain_hidden(self) -> int:
        """Width of the plain MLP, ``int(hidden_size * mlp_ratio)`` as in the reference."""
        return int(self.hidden_size * self.mlp_ratio)

    @property
    def mlp_hidden(self) -> int:
        """The MLP's intermediate width (plain, or the parameter-matched gated width)."""
        if not self.gated:
            return self.plain_hidden
        return matched_width(self.hidden_size, self.plain_hidden, bias=self.bias)

    @property
    def out_channels(self) -> int:
        """Output channels: the noise prediction, and with ``learn_sigma`` the variances."""
        return 2 * self.in_channels if self.learn_sigma else self.in_channels

    @property
    def num_patches(self) -> int:
        """Tokens per image, ``(input_size / patch_size)**2``."""
        return (self.input_size // self.patch_size) ** 2


def dit_config(name: str, *, input_size: int = 32, in_channels: int = 4, num_classes: int = 1000,
               **overrides) -> DiTConfig:
    """The named reference configuration, e.g. ``dit_config("DiT-XL/2")``.

    Names are case-insensitive, with or without the ``"DiT-"`` prefix: ``S``, ``B``, ``L``,
    ``XL`` (depth, width and heads of the reference) with patch size 2, 4 or 8 (see
    :data:`DIT_CONFIGS`). The defaults (input 32, 4 channels, 1000 classes) are the
    reference's 256x256 ImageNet latents. ``overrides`` set any other :class:`DiTConfig`
    field (``learn_sigma=False``, ``activation="relu"`` ...).
    """
    key = str(name).strip().upper()
    if key.startswith("DIT-"):
        key = key[4:]
    if key not in DIT_CONFIGS:
        hint = did_you_mean(key, DIT_CONFIGS, n=3, prefix="; ")
        raise ConfigError("name", f"unknown DiT config {name!r}{hint} "
                                  f"(valid: {', '.join(DIT_CONFIGS)})")
    size, patch = key.split("/")
    depth, hidden, heads = _SIZES[size]
    config = DiTConfig(input_size=input_size, patch_size=int(patch), in_channels=in_channels,
                       hidden_size=hidden, depth=depth, num_heads=heads, num_classes=num_classes)
    return replace(config, **overrides) if overrides else config


def modulate(x: Tensor, shift: Tensor, scale: Tensor) -> Tensor:
    """adaLN modulation ``x * (1 + scale) + shift`` of tokens (N, T, D) by (N, D) vectors."""
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


def timestep_embedding(t: Tensor, dim: int, max_period: float = 10000.0) -> Tensor:
    """Sinusoidal features (N, dim) of (possibly fractional) timesteps ``t`` (N,).

    ``[cos(t f_i), sin(t f_i)]`` with ``f_i = max_period**(-i / half)``, ``i < half = dim // 2``,
    and a zero column for odd ``dim`` (the reference's GLIDE/ADM recipe).
    """
    half = dim // 2
    freqs = torch.exp(-math.log(max_period)
                      * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    args = t[:, None].float() * freqs[None]
    embedding = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
    if dim % 2:
        embedding = torch.cat([embedding, torch.zeros_like(embedding[:, :1])], dim=-1)
    return embedding


def sincos_pos_embed_2d(dim: int, grid_size: int, *, device: torch.device | str | None = None
                        ) -> Tensor:
    """Fixed 2-D sin-cos position embedding (grid_size**2, dim), float32, in token order.

    As the reference (from MAE's ``pos_embed.py``): token ``k`` sits at row ``k // grid_size``
    and column ``k % grid_size``; the first ``dim/2`` channels encode the column and the last
    ``dim/2`` the row, each as ``[sin(pos w_j), cos(pos w_j)]`` with
    ``w_j = 10000**(-j / (dim/4))``, ``j < dim/4``. Computed in float64.
    """
    if dim % 4:
        raise ValueError(f"dim must be a multiple of 4, got {dim}")
    quarter = dim // 4
    omega = 1.0 / 10000 ** (torch.arange(quarter, dtype=torch.float64, device=device) / quarter)
    index = torch.arange(grid_size * grid_size, dtype=torch.float64, device=device)
    halves = []
    for pos in (index.remainder(grid_size), index.div(grid_size, rounding_mode="floor")):
        angles = pos[:, None] * omega[None]
        halves.append(torch.cat([torch.sin(angles), torch.cos(angles)], dim=1))
    return torch.cat(halves, dim=1).float()


def unpatchify(tokens: Tensor, patch_size: int, channels: int) -> Tensor:
    """Tokens (N, T, p*p*C) -> images (N, C, H, W), ``T = (H/p)**2`` in row-major order.

    Each token holds its patch as (p, p, C) in row, column, channel order, as the reference.
    """
    n, length, width = tokens.shape
    p = patch_size
    side = math.isqrt(length)
    if side * side != length or width != p * p * channels:
        raise ValueError(f"expected (N, h*w, {p * p * channels}) tokens of a square grid, "
                         f"got {tuple(tokens.shape)}")
    x = tokens.reshape(n, side, side, p, p, channels)
    x = torch.einsum("nhwpqc->nchpwq", x)
    return x.reshape(n, channels, side * p, side * p)


class PatchEmbed(nn.Module):
    """Cut (N, C, H, W) into p x p patches and map each to a token: a conv, kernel = stride = p."""

    def __init__(self, patch_size: int, in_channels: int, hidden_size: int, bias: bool = True
                 ) -> None:
        super().__init__()
        self.proj = nn.Conv2d(in_channels, hidden_size, patch_size, stride=patch_size, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        """Tokens (N, T, D) in row-major patch order."""
        return self.proj(x).flatten(2).transpose(1, 2)


class TimestepEmbedder(nn.Module):
    """Timesteps (N,) -> vectors (N, D): 256 sinusoidal features, then Linear-SiLU-Linear."""

    def __init__(self, hidden_size: int, frequency_embedding_size: int = FREQUENCY_EMBEDDING_SIZE,
                 bias: bool = True) -> None:
        super().__init__()
        self.frequency_embedding_size = frequency_embedding_size
        self.fc1 = nn.Linear(frequency_embedding_size, hidden_size, bias=bias)
        self.fc2 = nn.Linear(hidden_size, hidden_size, bias=bias)

    def forward(self, t: Tensor) -> Tensor:
        """Embed the timesteps ``t`` (N,)."""
        features = timestep_embedding(t, self.frequency_embedding_size).to(self.fc1.weight.dtype)
        return self.fc2(F.silu(self.fc1(features)))


class LabelEmbedder(nn.Module):
    """Class labels (N,) -> vectors (N, D), with label dropout for classifier-free guidance.

    With ``dropout_prob > 0`` the table has one extra row, the null class ``num_classes``; in
    training each label is replaced by it with probability ``dropout_prob`` (the mask drawn
    from ``generator`` when given, so training can be deterministic). ``force_drop_ids``
    (N,) replaces exactly the labels where it is 1, in training and eval alike (a sampler's
    unconditional pass).
    """

    def __init__(self, num_classes: int, hidden_size: int, dropout_prob: float) -> None:
        super().__init__()
        self.num_classes = num_classes
        self.dropout_prob = dropout_prob
        self.embedding_table = nn.Embedding(num_classes + int(dropout_prob > 0), hidden_size)

    def token_drop(self, labels: Tensor, force_drop_ids: Tensor | None = None,
                   generator: torch.Generator | None = None) -> Tensor:
        """The labels with the dropped ones replaced by the null class."""
        if self.embedding_table.num_embeddings == self.num_classes:
            raise ValueError("no null class to drop labels to: class_dropout_prob is 0")
        if force_drop_ids is None:
            device = generator.device if generator is not None else labels.device
            drop = torch.rand(labels.shape[0], generator=generator, device=device) < self.dropout_prob
            drop = drop.to(labels.device)
        else:
            drop = force_drop_ids.to(labels.device) == 1
        return torch.where(drop, torch.full_like(labels, self.num_classes), labels)

    def forward(self, labels: Tensor, train: bool, force_drop_ids: Tensor | None = None,
                generator: torch.Generator | None = None) -> Tensor:
        """Embed ``labels``, dropping some when ``train`` (and all of ``force_drop_ids``)."""
        if (train and self.dropout_prob > 0) or force_drop_ids is not None:
            labels = self.token_drop(labels, force_drop_ids, generator)
        return self.embedding_table(labels)


class Attention(nn.Module):
    """Multi-head self-attention over all tokens (no mask), fused ``scaled_dot_product_attention``."""

    def __init__(self, hidden_size: int, num_heads: int, bias: bool = True) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(hidden_size, 3 * hidden_size, bias=bias)
        self.proj = nn.Linear(hidden_size, hidden_size, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        """Attend over the tokens of ``x`` (N, T, D)."""
        n, length, width = x.shape
        # qkv output laid out as (3, heads, head_dim), as timm's Attention
        qkv = self.qkv(x).reshape(n, length, 3, self.num_heads, width // self.num_heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(n, length, width))


class DiTBlock(nn.Module):
    """Transformer block with adaLN-Zero conditioning; returns the residual stream.

    ``shift, scale, gate`` (for attention, then MLP) are ``adaLN_modulation(SiLU(c))``
    split in six; ``x += gate * f(modulate(norm(x), shift, scale))`` for ``f`` = attention, MLP.
    """

    def __init__(self, config: DiTConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.norm1 = _block_norm(config)
        self.attn = Attention(d, config.num_heads, bias=config.bias)
        self.norm2 = _block_norm(config)
        if config.gated:
            self.mlp: nn.Module = GatedFFN(d, config.mlp_hidden, GATE_KINDS[config.ffn],
                                           bias=config.bias)
        else:
            self.mlp = FFN(d, config.mlp_hidden, config.activation, bias=config.bias)
        self.adaLN_modulation = nn.Linear(d, 6 * d, bias=config.bias)

    def forward(self, x: Tensor, c: Tensor) -> Tensor:
        """Update tokens ``x`` (N, T, D) under conditioning ``c`` (N, D)."""
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = (
            self.adaLN_modulation(F.silu(c)).chunk(6, dim=1))
        x = x + gate_msa.unsqueeze(1) * self.attn(modulate(self.norm1(x), shift_msa, scale_msa))
        return x + gate_mlp.unsqueeze(1) * self.mlp(modulate(self.norm2(x), shift_mlp, scale_mlp))


class FinalLayer(nn.Module):
    """adaLN-modulated final norm (shift and scale from ``c``) and a linear map to patches."""

    def __init__(self, config: DiTConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.norm_final = _block_norm(config)
        self.linear = nn.Linear(d, config.patch_size ** 2 * config.out_channels, bias=config.bias)
        self.adaLN_modulation = nn.Linear(d, 2 * d, bias=config.bias)

    def forward(self, x: Tensor, c: Tensor) -> Tensor:
        """Tokens (N, T, D) -> patch values (N, T, p*p*out_channels)."""
        shift, scale = self.adaLN_modulation(F.silu(c)).chunk(2, dim=1)
        return self.linear(modulate(self.norm_final(x), shift, scale))


class DiT(nn.Module):
    """Diffusion Transformer: ``model(x, t, y)`` -> (N, out_channels, H, W).

    Args:
        config: the model's shape and components (:func:`dit_config` for the named ones).
        seed: seeds the weight initialisation (a private ``torch.Generator``; the global CPU
            RNG is left as it was). ``None`` draws from the global RNG.

    Initialisation follows the reference: xavier-uniform weights for every linear layer and
    for the patch-embedding conv (as the linear map of a flattened patch), zero biases,
    normal(0, 0.02) for the label table and both timestep-MLP weights, and zero for every
    adaLN modulation layer and the final linear layer, so the output is exactly zero at
    initialisation. The position embedding is a fixed buffer (the reference stores it as an
    ``nn.Parameter`` with ``requires_grad=False``, which its parameter count includes).
    """

    def __init__(self, config: DiTConfig, seed: int | None = None) -> None:
        super().__init__()
        self.config = config
        d = config.hidden_size
        # torch's layers draw their default init from the global CPU RNG; with a seed, restore it
        with torch.random.fork_rng(devices=[], enabled=seed is not None):
            self.x_embedder = PatchEmbed(config.patch_size, config.in_channels, d,
                                         bias=config.bias)
            self.t_embedder = TimestepEmbedder(d, bias=config.bias)
            self.y_embedder = LabelEmbedder(config.num_classes, d, config.class_dropout_prob)
            self.blocks = nn.ModuleList(DiTBlock(config) for _ in range(config.depth))
            self.final_layer = FinalLayer(config)
        self.register_buffer("pos_embed", torch.empty(1, config.num_patches, d))
        self.reset_parameters(seed)

    @torch.no_grad()
    def reset_parameters(self, seed: int | None = None) -> None:
        """(Re-)initialise every weight and the position embedding (see the class docstring)."""
        generator = None
        if seed is not None:
            generator = torch.Generator().manual_seed(int(seed))
        grid = self.config.input_size // self.config.patch_size
        if not self.pos_embed.is_meta:
            pos = sincos_pos_embed_2d(self.config.hidden_size, grid)
            self.pos_embed.copy_(pos.unsqueeze(0).to(self.pos_embed))
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Conv2d)):
                _xavier_uniform_(module.weight, generator)
                if module.bias is not None:
                    module.bias.zero_()
        _normal_(self.y_embedder.embedding_table.weight, 0.02, generator)
        _normal_(self.t_embedder.fc1.weight, 0.02, generator)
        _normal_(self.t_embedder.fc2.weight, 0.02, generator)
        zeroed = [block.adaLN_modulation for block in self.blocks]
        zeroed += [self.final_layer.adaLN_modulation, self.final_layer.linear]
        for linear in zeroed:
            linear.weight.zero_()
            if linear.bias is not None:
                linear.bias.zero_()

    def unpatchify(self, tokens: Tensor) -> Tensor:
        """Patch values (N, T, p*p*out_channels) -> images (N, out_channels, H, W)."""
        return unpatchify(tokens, self.config.patch_size, self.config.out_channels)

    def forward(self, x: Tensor, t: Tensor, y: Tensor, *, force_drop_ids: Tensor | None = None,
                generator: torch.Generator | None = None) -> Tensor:
        """Predict for inputs ``x`` (N, C, H, W) at timesteps ``t`` (N,) with labels ``y`` (N,).

        In training mode labels are dropped to the null class with probability
        ``class_dropout_prob`` (mask drawn from ``generator`` when given); ``force_drop_ids``
        drops exactly the labels where it is 1.
        """
        c = self.config
        if x.dim() != 4 or tuple(x.shape[1:]) != (c.in_channels, c.input_size, c.input_size):
            raise ValueError(f"expected (N, {c.in_channels}, {c.input_size}, {c.input_size}) "
                             f"input, got {tuple(x.shape)}")
        h = self.x_embedder(x) + self.pos_embed.to(x.dtype)
        cond = self.t_embedder(t) + self.y_embedder(y, self.training, force_drop_ids, generator)
        for block in self.blocks:
            h = block(h, cond)
        return self.unpatchify(self.final_layer(h, cond))

    def num_params(self) -> int:
        """Number of trainable parameters (the fixed position embedding is a buffer, not one)."""
        return sum(p.numel() for p in self.parameters())

    def flops_per_image(self) -> int:
        """Forward FLOPs for one image.

        Convention of :mod:`actlab.nn.ffn`: a multiply-add is 2 FLOPs, bias adds count,
        activation, norm, softmax, modulation, gating and residual adds do not. Counted: the
        patch-embedding conv, the timestep MLP, per block the adaLN linear (once per image),
        the QKV and output projections and the MLP (per token), the attention scores and
        weighted values (``4 T**2 D``), and the final layer. The DiT paper's Gflops count a
        multiply-add once, so they are about half of this (its README: 119 Gflops for
        DiT-XL/2 at 256x256, i.e. input 32).
        """
        c = self.config
        d, t, b = c.hidden_size, c.num_patches, int(c.bias)
        patch_in = c.patch_size ** 2 * c.in_channels
        patch_out = c.patch_size ** 2 * c.out_channels
        embed = t * (2 * patch_in * d + b * d)
        timestep = 2 * FREQUENCY_EMBEDDING_SIZE * d + 2 * d * d + 2 * b * d
        per_token = (2 * d * 3 * d + b * 3 * d + 2 * d * d + b * d
                     + ffn_flops_per_token(d, c.mlp_hidden, gated=c.gated, bias=c.bias))
        block = 2 * d * 6 * d + b * 6 * d + t * per_token + 4 * t * t * d
        final = 2 * d * 2 * d + b * 2 * d + t * (2 * d * patch_out + b * patch_out)
        return embed + timestep + c.depth * block + final

    def extra_repr(self) -> str:
        c = self.config
        return (f"input={c.input_size}, patch={c.patch_size}, tokens={c.num_patches}, "
                f"depth={c.depth}, d={c.hidden_size}, heads={c.num_heads}, ffn={c.ffn}, "
                f"mlp_hidden={c.mlp_hidden}, activation={c.activation!r}, norm={c.norm!r}, "
                f"bias={c.bias}, out_channels={c.out_channels}")


def _block_norm(config: DiTConfig) -> nn.Module:
    # No learned affine (adaLN supplies it); the reference's eps unless the spec sets one.
    _, options = parse_norm(config.norm)
    eps = {} if "eps" in options else {"eps": NORM_EPS}
    return make_norm(config.norm, config.hidden_size, affine=False, **eps)


# Both draw on the CPU (values independent of the weight's device), nothing on the meta device.
def _normal_(weight: Tensor, std: float, generator: torch.Generator | None) -> None:
    if weight.is_meta:
        return
    values = torch.randn(weight.shape, generator=generator, dtype=torch.float32, device="cpu")
    weight.copy_((values * std).to(device=weight.device, dtype=weight.dtype))


def _xavier_uniform_(weight: Tensor, generator: torch.Generator | None) -> None:
    # Xavier on the 2-D view (out, in * kernel...): a conv counts as the linear map of a patch.
    if weight.is_meta:
        return
    bound = math.sqrt(6.0 / (weight[0].numel() + weight.shape[0]))
    values = torch.rand(weight.shape, generator=generator, dtype=torch.float32, device="cpu")
    weight.copy_((values * (2 * bound) - bound).to(device=weight.device, dtype=weight.dtype))
