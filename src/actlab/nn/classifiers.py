"""CPU-scale image classifiers by kind: the MLP of "Bug or Feature²" App. D.2 (with or without
skips), a ResNet, a ViT, a MaxViT."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from actlab.config import choose

MODEL_KINDS = ("mlp", "mlp-skip", "resnet", "vit")
# Every kind build_classifier knows. MaxViT ("Bug or Feature²" App. D.5) is accepted where an
# experiment asks for it, not in the defaults that list MODEL_KINDS (their references stay).
CLASSIFIER_KINDS = (*MODEL_KINDS, "maxvit")
# Kinds whose norm arguments are pre-norms of transformer layers (``norm``), not the norm
# before every activation (``pre_norm``).
TRANSFORMER_KINDS = ("vit", "maxvit")


def build_classifier(kind: str, data: Any, activation: str, *, pre_norm: str | None = None,
                     norm: str | None = None, norm_bias: bool = True, hidden: int = 128,
                     seed: int = 0) -> nn.Module:
    """A CPU-scale classifier for ``data`` (an :class:`~actlab.data.digits.ImageData`).

    ``kind``: ``mlp`` / ``mlp-skip`` (the 5-block MLP of "Bug or Feature²", hidden
    ``hidden``), ``resnet`` (widths 8-16-32, BatchNorm), ``vit`` (width 32, 2 blocks,
    2 heads, 16 patches) or ``maxvit`` (:func:`~actlab.nn.maxvit.small_maxvit_config`).
    ``pre_norm`` is the norm directly before every activation (the MLP's and ResNet's norm,
    the ViT's ``mlp_norm``), ``norm`` the ViT's and MaxViT's transformer pre-norms
    (``layernorm`` by default; MaxViT's convolutions keep their BatchNorm);
    ``None`` keeps each model's default. Parameters are drawn from ``seed``.
    """
    from actlab.nn.maxvit import MaxViT, small_maxvit_config
    from actlab.nn.mlp import MLP
    from actlab.nn.resnet import ResNet
    from actlab.nn.vit import ViT

    choose("model", kind, CLASSIFIER_KINDS)
    channels, size, _ = data.image_shape
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        if kind in ("mlp", "mlp-skip"):
            return MLP(data.in_features, data.num_classes, hidden=hidden, depth=5,
                       activation=activation, norm=pre_norm or "none", skip=kind == "mlp-skip",
                       norm_bias=norm_bias)
        if kind == "resnet":
            return ResNet(channels, data.num_classes, widths=(8, 16, 32), blocks=1,
                          activation=activation, norm=pre_norm or "batchnorm", norm_bias=norm_bias)
        if kind == "maxvit":
            if pre_norm not in (None, "none"):
                raise ValueError("maxvit: no norm sits directly before its activations "
                                 f"(pre_norm={pre_norm!r}); choose its pre-norms with norm=")
            return MaxViT(small_maxvit_config(size, channels, data.num_classes,
                                              activation=activation, norm=norm or "layernorm"))
        return ViT(image_size=size, patch_size=max(1, size // 4), in_channels=channels,
                   num_classes=data.num_classes, dim=32, depth=2, heads=2, activation=activation,
                   norm=norm or "layernorm", mlp_norm=pre_norm or "none", norm_bias=norm_bias)
