"""The feature-network interface behind FID and IS: images in, features and logits out.

A :class:`FeatureNetwork` wraps an ``nn.Module`` whose ``forward(images)`` returns
``(features, logits)``: ``(N, D)`` features for the Fréchet distance and ``(N, K)`` class
logits for the Inception Score. It runs the module in batches, without gradients and in
eval mode, and puts every submodule's train/eval flag back afterwards. Images are
``(N, C, H, W)`` with values in ``[-1, 1]``; results come back on the CPU.

Every network has a ``name`` (e.g. ``"digits-classifier"``, ``"inception-v3-fid"``): a
Fréchet distance is only meaningful together with the features it was computed on, so the
metric names in :mod:`actlab.measure.fid` always carry it.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class FeatureNetwork:
    """Batched, gradient-free ``features``/``logits`` of a module returning both.

    ``channels`` and ``image_size`` (when given) are the input shape the module expects;
    other shapes raise ``ValueError``. ``image_size=None`` accepts any height and width.
    """

    def __init__(self, module: nn.Module, *, name: str, channels: int | None = None,
                 image_size: int | None = None, batch_size: int = 256) -> None:
        if not name or any(c.isspace() for c in name):
            raise ValueError(f"name must be a non-empty word without spaces, got {name!r}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.module = module
        self.name = name
        self.channels = channels
        self.image_size = image_size
        self.batch_size = batch_size

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"

    def features(self, images: Tensor) -> Tensor:
        """``(N, D)`` features of ``images``."""
        return self.features_and_logits(images)[0]

    def logits(self, images: Tensor) -> Tensor:
        """``(N, K)`` class logits of ``images``."""
        return self.features_and_logits(images)[1]

    def features_and_logits(self, images: Tensor) -> tuple[Tensor, Tensor]:
        """Both outputs from one pass over ``images`` (``(N, C, H, W)`` in ``[-1, 1]``)."""
        self.check_images(images)
        param = next(self.module.parameters(), None)
        device = param.device if param is not None else torch.device("cpu")
        dtype = param.dtype if param is not None else torch.float32
        # Remember each submodule's flag: module.train(mode) would flatten mixed states.
        modes = [(m, m.training) for m in self.module.modules()]
        feats, logits = [], []
        try:
            self.module.eval()
            with torch.no_grad():
                for batch in images.split(self.batch_size):
                    f, z = self.module(batch.to(device=device, dtype=dtype))
                    feats.append(f.float().cpu())
                    logits.append(z.float().cpu())
        finally:
            for m, mode in modes:
                m.training = mode
        return torch.cat(feats), torch.cat(logits)

    def check_images(self, images: Tensor) -> None:
        """Raise ``ValueError`` unless ``images`` is a non-empty ``(N, C, H, W)`` batch in [-1, 1].

        Also checks the expected channels and size when the network has them.
        """
        if not isinstance(images, Tensor) or images.dim() != 4 or len(images) == 0:
            shape = tuple(images.shape) if isinstance(images, Tensor) else type(images).__name__
            raise ValueError(f"{self.name}: images must be a non-empty (N, C, H, W) tensor, "
                             f"got {shape}")
        _, c, h, w = images.shape
        if self.channels is not None and c != self.channels:
            raise ValueError(f"{self.name}: expects {self.channels} channel(s), got {c}")
        if self.image_size is not None and (h, w) != (self.image_size, self.image_size):
            raise ValueError(f"{self.name}: expects {self.image_size}x{self.image_size} images, "
                             f"got {h}x{w}")
        if not torch.isfinite(images).all():
            raise ValueError(f"{self.name}: images contain NaN or infinite values")
        lo, hi = float(images.min()), float(images.max())
        if lo < -1.0 or hi > 1.0:
            raise ValueError(f"{self.name}: images must lie in [-1, 1], got values in "
                             f"[{lo:.4g}, {hi:.4g}] (rescale, or clamp a generator's output)")
