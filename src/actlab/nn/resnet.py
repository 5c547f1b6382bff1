"""A small CIFAR-style ResNet (BasicBlocks, BatchNorm by default) for CPU-scale studies.

It follows ResNet-18's design (3x3 stem, BasicBlock units, stride-2 stages, global average
pooling, one linear head, convolutions without biases as in "Bug or Feature²" App. D.1) at a width
and depth that train on two CPU cores: by default three stages of one block each with
16, 32 and 64 channels. Every norm sits directly before an activation (except the one
ending each block's residual branch), so Percentile Centering there controls sparsity.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn

from actlab.activations.spec_activation import make_activation
from actlab.nn.norms import make_norm


class BasicBlock(nn.Module):
    """``act(norm(conv(act(norm(conv(x))))) + shortcut(x))`` with 3x3 convolutions."""

    def __init__(self, in_ch: int, out_ch: int, stride: int, activation: str, norm: str,
                 norm_bias: bool = True) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_ch, out_ch, 3, stride, 1, bias=False)
        self.norm1 = make_norm(norm, out_ch, channels_first=True, bias=norm_bias)
        self.act1 = make_activation(activation)
        self.conv2 = nn.Conv2d(out_ch, out_ch, 3, 1, 1, bias=False)
        self.norm2 = make_norm(norm, out_ch, channels_first=True, bias=norm_bias)
        self.act2 = make_activation(activation)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_ch != out_ch:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_ch, out_ch, 1, stride, bias=False),
                make_norm(norm, out_ch, channels_first=True, bias=norm_bias))

    def forward(self, x: Tensor) -> Tensor:
        """Apply the block."""
        h = self.act1(self.norm1(self.conv1(x)))
        h = self.norm2(self.conv2(h))
        return self.act2(h + self.shortcut(x))


class ResNet(nn.Module):
    """Small ResNet: 3x3 stem, stages of BasicBlocks, average pool, linear head.

    ``widths`` and ``blocks`` give channels and block count per stage (the first stage keeps
    the resolution, later ones halve it). ``norm`` is a :func:`~actlab.nn.norms.make_norm`
    name applied per channel (``batchnorm`` by default).
    """

    def __init__(self, in_channels: int = 3, num_classes: int = 10,
                 widths: Sequence[int] = (16, 32, 64), blocks: Sequence[int] | int = 1,
                 activation: str = "relu", norm: str = "batchnorm", norm_bias: bool = True) -> None:
        super().__init__()
        counts = [blocks] * len(widths) if isinstance(blocks, int) else list(blocks)
        if len(counts) != len(widths) or not widths:
            raise ValueError(f"need one block count per stage, got widths={widths}, blocks={blocks}")
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, widths[0], 3, 1, 1, bias=False),
            make_norm(norm, widths[0], channels_first=True, bias=norm_bias),
            make_activation(activation))
        stages = []
        in_ch = widths[0]
        for i, (width, count) in enumerate(zip(widths, counts)):
            for j in range(count):
                stride = 2 if i > 0 and j == 0 else 1
                stages.append(BasicBlock(in_ch, width, stride, activation, norm, norm_bias))
                in_ch = width
        self.blocks = nn.ModuleList(stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(in_ch, num_classes, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        """Logits for a batch of ``(N, C, H, W)`` images."""
        x = self.stem(x)
        for block in self.blocks:
            x = block(x)
        return self.head(self.pool(x).flatten(1))
