"""Image classifiers by kind: the MLP of "Bug or Feature²" App. D.2 (with or without skips), a
ResNet, a ViT, a MaxViT; each at a CPU scale (``size="cpu"``, the default) or at the size of
"Bug or Feature²" (``size="paper"``, :data:`PAPER_SIZES`)."""

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
# Named sizes: "cpu" (each kind's small default) or "paper", the models "Bug or Feature²" trains.
CLASSIFIER_SIZES = ("cpu", "paper")
PAPER_SIZES = {
    "mlp": "hidden width d = 1024 (App. D.2, CIFAR-10)",
    "mlp-skip": "hidden width 1024, App. D.2's MLP with skips (App. B.1.3 compares the two)",
    "resnet": "ResNet-18: BasicBlocks, 64-128-256-512 channels, two blocks a stage (App. D.3); "
              "the 3x3 stride-1 stem of CIFAR ResNets, no max-pool (ours: App. D.3 says "
              "'standard')",
    "maxvit": "MaxViT-T (App. D.5, maxvit_config('maxvit-t')) at the images' size (224 x 224 "
              "in App. D.1)",
}


def build_classifier(kind: str, data: Any, activation: str, *, pre_norm: str | None = None,
                     norm: str | None = None, norm_bias: bool = True, hidden: int = 128,
                     seed: int = 0, size: str = "cpu") -> nn.Module:
    """A classifier for ``data`` (an :class:`~actlab.data.digits.ImageData`, or anything with
    its ``image_shape``, ``in_features`` and ``num_classes``).

    ``kind``: ``mlp`` / ``mlp-skip`` (the 5-block MLP of "Bug or Feature²", hidden
    ``hidden``), ``resnet`` (widths 8-16-32, BatchNorm), ``vit`` (width 32, 2 blocks,
    2 heads, 16 patches) or ``maxvit`` (:func:`~actlab.nn.maxvit.small_maxvit_config`).
    ``pre_norm`` is the norm directly before every activation (the MLP's and ResNet's norm,
    the ViT's ``mlp_norm``), ``norm`` the ViT's and MaxViT's transformer pre-norms
    (``layernorm`` by default; MaxViT's convolutions keep their BatchNorm);
    ``None`` keeps each model's default. Parameters are drawn from ``seed``.

    ``size="paper"`` builds "Bug or Feature²"'s model of the kind instead (:data:`PAPER_SIZES`;
    ``hidden`` is then 1024); the plain ViT has no such size (its ViT column is MaxViT-T).
    """
    from actlab.nn.maxvit import MaxViT, maxvit_config, small_maxvit_config
    from actlab.nn.mlp import MLP
    from actlab.nn.resnet import ResNet
    from actlab.nn.vit import ViT

    choose("model", kind, CLASSIFIER_KINDS)
    choose("size", size, CLASSIFIER_SIZES)
    paper = size == "paper"
    if paper and kind not in PAPER_SIZES:
        raise ValueError(f"{kind}: no paper size (\"Bug or Feature²\" trains no plain ViT; its "
                         f"ViT column is MaxViT-T: model maxvit); kinds with one: "
                         f"{', '.join(PAPER_SIZES)}")
    channels, image_size, _ = data.image_shape
    hidden = 1024 if paper else hidden
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        if kind in ("mlp", "mlp-skip"):
            return MLP(data.in_features, data.num_classes, hidden=hidden, depth=5,
                       activation=activation, norm=pre_norm or "none", skip=kind == "mlp-skip",
                       norm_bias=norm_bias)
        if kind == "resnet":
            widths, blocks = ((64, 128, 256, 512), 2) if paper else ((8, 16, 32), 1)
            return ResNet(channels, data.num_classes, widths=widths, blocks=blocks,
                          activation=activation, norm=pre_norm or "batchnorm", norm_bias=norm_bias)
        if kind == "maxvit":
            if pre_norm not in (None, "none"):
                raise ValueError("maxvit: no norm sits directly before its activations "
                                 f"(pre_norm={pre_norm!r}); choose its pre-norms with norm=")
            shape = {"image_size": image_size, "in_channels": channels,
                     "num_classes": data.num_classes, "activation": activation,
                     "norm": norm or "layernorm"}
            return MaxViT(maxvit_config("maxvit-t", **shape) if paper else
                          small_maxvit_config(**shape))
        return ViT(image_size=image_size, patch_size=max(1, image_size // 4), in_channels=channels,
                   num_classes=data.num_classes, dim=32, depth=2, heads=2, activation=activation,
                   norm=norm or "layernorm", mlp_norm=pre_norm or "none", norm_bias=norm_bias)
