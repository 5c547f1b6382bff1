"""A small Vision Transformer (pre-norm blocks, class token) for CPU-scale studies.

``model.blocks`` is an ``nn.ModuleList`` of :class:`ViTBlock`; each block's output is the
residual stream after it, so a forward hook on ``model.blocks[i]`` reads hidden states
(e.g. their mean, to study activation bias). ``model.embed(x)`` returns the stream before
the first block.

``norm`` chooses the pre-norms (``layernorm`` by default, or any
:func:`~actlab.nn.norms.make_norm` name); ``mlp_norm`` optionally puts a norm between the
MLP's up-projection and its activation (``none`` by default), which is where Percentile
Centering controls the activation's sparsity. Linear layers omit biases by default, as in
"Bug or Feature²" App. D.1. ``drop_path`` is the stochastic depth of the largest rate, reached
linearly at the last block as timm's ``VisionTransformer`` spreads it (0 by default: none).

:func:`vit_base` is ViT-B/16 (Dosovitskiy et al., 2021) at 224 x 224: width 768, 12 blocks of
12 heads, MLP 3,072, 16 x 16 patches, biases in every linear layer, as timm's
``vit_base_patch16_224`` and torchvision's ``vit_b_16`` (86,567,656 parameters at 1,000
classes, torchvision's ``num_params``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from actlab.activations.spec_activation import make_activation
from actlab.nn.maxvit import StochasticDepth
from actlab.nn.norms import make_norm


class Attention(nn.Module):
    """Multi-head self-attention (scaled dot-product, no mask)."""

    def __init__(self, dim: int, heads: int, bias: bool = False) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"dim {dim} is not divisible by heads {heads}")
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=bias)
        self.proj = nn.Linear(dim, dim, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        """Attend over the tokens of ``(B, T, D)`` input."""
        b, t, d = x.shape
        q, k, v = self.qkv(x).reshape(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class ViTMLP(nn.Module):
    """``down(act(norm(up(x))))``: the transformer MLP with an optional pre-activation norm."""

    def __init__(self, dim: int, hidden: int, activation: str, norm: str = "none",
                 bias: bool = False, norm_bias: bool = True) -> None:
        super().__init__()
        self.up = nn.Linear(dim, hidden, bias=bias)
        self.norm = make_norm(norm, hidden, bias=norm_bias)
        self.act = make_activation(activation)
        self.down = nn.Linear(hidden, dim, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        """Apply the MLP token-wise."""
        return self.down(self.act(self.norm(self.up(x))))


class ViTBlock(nn.Module):
    """Pre-norm transformer block: ``x + attn(norm1(x))`` then ``x + mlp(norm2(x))``."""

    def __init__(self, dim: int, heads: int, mlp_hidden: int, activation: str, norm: str,
                 mlp_norm: str = "none", bias: bool = False, norm_bias: bool = True,
                 drop_path: float = 0.0) -> None:
        super().__init__()
        self.norm1 = make_norm(norm, dim)
        self.attn = Attention(dim, heads, bias)
        self.norm2 = make_norm(norm, dim)
        self.mlp = ViTMLP(dim, mlp_hidden, activation, mlp_norm, bias, norm_bias)
        # no module at rate 0, so the default block's module tree is as it always was
        self.drop_path = StochasticDepth(drop_path) if drop_path > 0 else None

    def forward(self, x: Tensor) -> Tensor:
        """Update the residual stream ``(B, T, D)`` (each branch dropped per sample at
        ``drop_path`` in training)."""
        drop = self.drop_path or (lambda branch: branch)
        x = x + drop(self.attn(self.norm1(x)))
        return x + drop(self.mlp(self.norm2(x)))


class ViT(nn.Module):
    """Small ViT: patch embedding, class token, learned positions, blocks, head on the class token.

    Defaults (8x8 single-channel images, 2x2 patches, width 64, 4 blocks of 4 heads, MLP
    ratio 2) suit scikit-learn's digits; pass ``image_size=32, in_channels=3`` for CIFAR-10.
    """

    def __init__(self, image_size: int = 8, patch_size: int = 2, in_channels: int = 1,
                 num_classes: int = 10, dim: int = 64, depth: int = 4, heads: int = 4,
                 mlp_ratio: float = 2.0, activation: str = "gelu", norm: str = "layernorm",
                 mlp_norm: str = "none", bias: bool = False, norm_bias: bool = True,
                 drop_path: float = 0.0) -> None:
        super().__init__()
        if image_size % patch_size:
            raise ValueError(f"image_size {image_size} is not divisible by patch_size {patch_size}")
        self.image_size = image_size
        num_patches = (image_size // patch_size) ** 2
        self.patch = nn.Conv2d(in_channels, dim, patch_size, patch_size, bias=bias)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, num_patches + 1, dim) * 0.02)
        hidden = int(round(dim * mlp_ratio))
        if not 0.0 <= drop_path < 1.0:
            raise ValueError(f"drop_path must be in [0, 1), got {drop_path}")
        rates = [drop_path * i / max(1, depth - 1) for i in range(depth)]  # 0 .. drop_path
        self.blocks = nn.ModuleList(
            ViTBlock(dim, heads, hidden, activation, norm, mlp_norm, bias, norm_bias, rate)
            for rate in rates)
        self.norm = make_norm(norm, dim)
        self.head = nn.Linear(dim, num_classes, bias=bias)

    def embed(self, x: Tensor) -> Tensor:
        """The residual stream ``(B, 1 + patches, D)`` before the first block."""
        if x.dim() != 4 or x.shape[-1] != self.image_size or x.shape[-2] != self.image_size:
            raise ValueError(f"expected (N, C, {self.image_size}, {self.image_size}) images, "
                             f"got {tuple(x.shape)}")
        tokens = self.patch(x).flatten(2).transpose(1, 2)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        return torch.cat([cls, tokens], dim=1) + self.pos

    def forward(self, x: Tensor) -> Tensor:
        """Logits for a batch of images."""
        h = self.embed(x)
        for block in self.blocks:
            h = block(h)
        return self.head(self.norm(h)[:, 0])


def vit_base(image_size: int = 224, in_channels: int = 3, num_classes: int = 1000,
             **overrides) -> ViT:
    """ViT-B/16 (module docstring): ``overrides`` set any other :class:`ViT` argument
    (``activation``, ``drop_path``, ...)."""
    shape = {"patch_size": 16, "dim": 768, "depth": 12, "heads": 12, "mlp_ratio": 4.0,
             "bias": True}
    return ViT(image_size=image_size, in_channels=in_channels, num_classes=num_classes,
               **{**shape, **overrides})
