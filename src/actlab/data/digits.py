"""scikit-learn's bundled handwritten digits (8x8, 10 classes) as a fixed train/test split.

The data ship with scikit-learn, so nothing is downloaded. The split is a seeded
permutation (``split_seed``), so every run with the same arguments sees the same images.
Pixels (0..16) are scaled to [0, 1] and, by default, standardized with the training set's
mean and standard deviation. ``image_size`` upsamples bilinearly (e.g. to 16 or 32 for
convolutional models); ``channels=3`` repeats the grey channel.

:func:`load_digits_pixels` gives the same images and split in pixel space for diffusion
models: scaled to [-1, 1] and not standardized.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor


@dataclass
class ImageData:
    """A labelled image classification split: ``x`` is ``(N, C, H, W)`` float, ``y`` long."""

    x_train: Tensor
    y_train: Tensor
    x_test: Tensor
    y_test: Tensor
    num_classes: int
    name: str = ""

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """``(C, H, W)`` of one image."""
        return tuple(self.x_train.shape[1:])  # type: ignore[return-value]

    @property
    def in_features(self) -> int:
        """Number of values in one flattened image."""
        return int(self.x_train[0].numel())

    def subset(self, train: int | None = None, test: int | None = None) -> ImageData:
        """The first ``train`` training and ``test`` test examples (all when ``None``)."""
        return ImageData(self.x_train[:train], self.y_train[:train], self.x_test[:test],
                         self.y_test[:test], self.num_classes, self.name)


def load_digits(*, test_fraction: float = 0.2, split_seed: int = 0, image_size: int = 8,
                channels: int = 1, standardize: bool = True,
                dtype: torch.dtype = torch.float32) -> ImageData:
    """The 1797 digits as :class:`ImageData` with a fixed, seeded split.

    ``test_fraction`` of the images (rounded) form the test set. Raises ``ValueError`` on
    invalid arguments.
    """
    from sklearn.datasets import load_digits as _sk_load_digits

    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    if image_size < 8:
        raise ValueError(f"image_size must be >= 8 (the native size), got {image_size}")
    if channels not in (1, 3):
        raise ValueError(f"channels must be 1 or 3, got {channels}")
    bunch = _sk_load_digits()
    x = torch.tensor(bunch.images, dtype=torch.float64).unsqueeze(1) / 16.0
    y = torch.tensor(bunch.target, dtype=torch.long)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(split_seed))
    n_test = int(round(test_fraction * len(y)))
    test_idx, train_idx = order[:n_test], order[n_test:]
    if image_size != 8:
        x = F.interpolate(x, size=(image_size, image_size), mode="bilinear", align_corners=False)
    x_train, x_test = x[train_idx], x[test_idx]
    if standardize:
        mean, std = x_train.mean(), x_train.std()
        x_train, x_test = (x_train - mean) / std, (x_test - mean) / std
    if channels == 3:
        x_train, x_test = x_train.repeat(1, 3, 1, 1), x_test.repeat(1, 3, 1, 1)
    return ImageData(x_train.to(dtype), y[train_idx], x_test.to(dtype), y[test_idx], 10, "digits")


def load_digits_pixels(*, test_fraction: float = 0.2, split_seed: int = 0, image_size: int = 8,
                       channels: int = 1, dtype: torch.dtype = torch.float32) -> ImageData:
    """The digits of :func:`load_digits` (same split) with pixels in [-1, 1], for diffusion.

    Pixel value ``v`` (0..16) becomes ``v / 8 - 1``, so blank background is exactly -1 and
    full ink exactly 1 at the native size; bilinear upsampling mixes neighbouring pixels,
    so upsampled images stay inside [-1, 1]. The name is ``"digits-pixels"``.
    """
    data = load_digits(test_fraction=test_fraction, split_seed=split_seed,
                       image_size=image_size, channels=channels, standardize=False,
                       dtype=torch.float64)

    def to_signed(x: Tensor) -> Tensor:
        return (x * 2.0 - 1.0).to(dtype)

    return ImageData(to_signed(data.x_train), data.y_train, to_signed(data.x_test),
                     data.y_test, data.num_classes, "digits-pixels")
