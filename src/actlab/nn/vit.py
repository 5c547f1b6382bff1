"""A small Vision Transformer (pre-norm blocks, class token) for CPU-scale studies.

``model.blocks`` is an ``nn.ModuleList`` of :class:`ViTBlock`; each block's output is the
residual stream after it, so a forward hook on ``model.blocks[i]`` reads hidden states
(e.g. their mean, to study activation bias). ``model.embed(x)`` returns the stream before
the first block.

``norm`` chooses the pre-norms (``layernorm`` by default, or any
:func:`~actlab.nn.norms.make_norm` name); ``mlp_norm`` optionally puts a norm between the
MLP's up-projection and its activation (``none`` by default), which is where Percentile
Centering controls the activation's sparsity. Linear layers omit biases by default, as in
"Bug or Feature²" App. D.1.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from actlab.activations.spec_activation import make_activation
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
                 mlp_norm: str = "none", bias: bool = False, norm_bias: bool = True) -> None:
        super().__init__()
        self.norm1 = make_norm(norm, dim)
        self.attn = Attention(dim, heads, bias)
        self.norm2 = make_norm(norm, dim)
        self.mlp = ViTMLP(dim, mlp_hidden, activation, mlp_norm, bias, norm_bias)

    def forward(self, x: Tensor) -> Tensor:
        """Update the residual stream ``(B, T, D)``."""
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    """Small ViT: patch embedding, class token, learned positions, blocks, head on the class token.

    Defaults (8x8 single-channel images, 2x2 patches, width 64, 4 blocks of 4 heads, MLP
    ratio 2) suit scikit-learn's digits; pass ``image_size=32, in_channels=3`` for CIFAR-10.
    """

    def __init__(self, image_size: int = 8, patch_size: int = 2, in_channels: int = 1,
                 num_classes: int = 10, dim: int = 64, depth: int = 4, heads: int = 4,
                 mlp_ratio: float = 2.0, activation: str = "gelu", norm: str = "layernorm",
                 mlp_norm: str = "none", bias: bool = False, norm_bias: bool = True) -> None:
        super().__init__()
        if image_size % patch_size:
            raise ValueError(f"image_size {image_size} is not divisible by patch_size {patch_size}")
        self.image_size = image_size
        num_patches = (image_size // patch_size) ** 2
        self.patch = nn.Conv2d(in_channels, dim, patch_size, patch_size, bias=bias)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, num_patches + 1, dim) * 0.02)
        hidden = int(round(dim * mlp_ratio))
        self.blocks = nn.ModuleList(
            ViTBlock(dim, heads, hidden, activation, norm, mlp_norm, bias, norm_bias)
            for _ in range(depth))
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
