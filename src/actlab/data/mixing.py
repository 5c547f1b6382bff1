"""Mixup and CutMix with label smoothing, as timm's ``Mixup`` in ``mode="batch"`` (the DyT
recipe that "Rethinking Activation Functions" §4.1 follows: mixup alpha 0.8, CutMix alpha 1.0,
one or the other with probability 1/2, label smoothing 0.1), written from timm's
``timm/data/mixup.py`` (timm is not used).

One draw per step: whether to mix (``prob``), CutMix or mixup (``switch_prob``), the weight
``lam`` from Beta(alpha, alpha) and, for CutMix, one box (side ``int(H sqrt(1 - lam))``,
centre uniform, clipped to the image; ``lam`` then set to the share of the image left
unpasted). Every image is mixed with a partner of the same batch. timm's partner is the image
at the mirrored position of each GPU's batch; ours is the neighbour in its pair (rows 2k and
2k + 1), so a data-parallel rank whose part of the global batch starts at an even row mixes
exactly as one process mixes the whole batch (both partners are another random image of the
randomly ordered batch). Targets become ``lam`` times the smoothed one-hot label plus
``1 - lam`` times the partner's (smoothing puts ``s / classes`` on every class and
``1 - s + s / classes`` on the true one).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

__all__ = ["Mixing", "MixDraw", "smoothed_targets"]


@dataclass(frozen=True)
class MixDraw:
    """One step's draw: ``lam`` and the CutMix box ``(top, bottom, left, right)`` (``None``
    for mixup or no mixing, ``lam = 1``)."""

    lam: float
    box: tuple[int, int, int, int] | None = None


def smoothed_targets(labels: Tensor, classes: int, smoothing: float) -> Tensor:
    """One-hot rows with label smoothing ``smoothing`` (float32)."""
    off = smoothing / classes
    out = torch.full((len(labels), classes), off, dtype=torch.float32)
    return out.scatter_(1, labels.long().view(-1, 1), 1.0 - smoothing + off)


@dataclass(frozen=True)
class Mixing:
    """Mixup / CutMix of a batch with smoothed soft targets (module docstring)."""

    classes: int
    mixup_alpha: float = 0.8
    cutmix_alpha: float = 1.0
    prob: float = 1.0
    switch_prob: float = 0.5
    smoothing: float = 0.1

    def __post_init__(self) -> None:
        if self.classes < 1 or self.mixup_alpha < 0 or self.cutmix_alpha < 0:
            raise ValueError(f"need classes >= 1 and alphas >= 0, got {self.classes}, "
                             f"{self.mixup_alpha}, {self.cutmix_alpha}")
        if not (0 <= self.prob <= 1 and 0 <= self.switch_prob <= 1 and 0 <= self.smoothing < 1):
            raise ValueError("prob and switch_prob must be in [0, 1], smoothing in [0, 1)")

    def draw(self, rng: np.random.Generator, height: int, width: int) -> MixDraw:
        """One step's draw (timm's ``_params_per_batch`` and ``cutmix_bbox_and_lam``)."""
        mixup, cutmix = self.mixup_alpha > 0, self.cutmix_alpha > 0
        if not (mixup or cutmix) or rng.random() >= self.prob:
            return MixDraw(1.0)
        use_cutmix = cutmix and (not mixup or rng.random() < self.switch_prob)
        alpha = self.cutmix_alpha if use_cutmix else self.mixup_alpha
        lam = float(rng.beta(alpha, alpha))
        if not use_cutmix:
            return MixDraw(lam)
        ratio = np.sqrt(1.0 - lam)
        cut_h, cut_w = int(height * ratio), int(width * ratio)
        cy, cx = int(rng.integers(0, height)), int(rng.integers(0, width))
        top, bottom = int(np.clip(cy - cut_h // 2, 0, height)), int(np.clip(cy + cut_h // 2, 0, height))
        left, right = int(np.clip(cx - cut_w // 2, 0, width)), int(np.clip(cx + cut_w // 2, 0, width))
        lam = 1.0 - (bottom - top) * (right - left) / float(height * width)
        return MixDraw(lam, (top, bottom, left, right))

    def __call__(self, images: Tensor, labels: Tensor, rng: np.random.Generator,
                 draw: MixDraw | None = None) -> tuple[Tensor, Tensor]:
        """``(mixed images, soft targets)`` of an even-sized batch ``(N, C, H, W)``; ``draw``
        (else one from ``rng``) lets every part of a global batch share one draw."""
        if len(images) % 2:
            raise ValueError(f"mixing pairs images: the batch must be even, got {len(images)}")
        draw = draw or self.draw(rng, images.shape[-2], images.shape[-1])
        partner = torch.arange(len(images)) ^ 1  # 0 <-> 1, 2 <-> 3, ...
        targets = smoothed_targets(labels, self.classes, self.smoothing)
        if draw.lam == 1.0:
            return images, targets
        mixed = images.clone()
        if draw.box is not None:
            top, bottom, left, right = draw.box
            mixed[:, :, top:bottom, left:right] = images[partner][:, :, top:bottom, left:right]
        else:
            mixed = images * draw.lam + images[partner] * (1.0 - draw.lam)
        return mixed, targets * draw.lam + targets[partner] * (1.0 - draw.lam)
