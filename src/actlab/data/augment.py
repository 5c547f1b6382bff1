"""Per-image augmentation of ImageNet-style training: the transforms of timm's
``transforms_imagenet_train`` that "Rethinking Activation Functions" §4.1 trains ViT-Base with
(through the DyT code it follows: ``datasets.py`` calls timm's ``create_transform``) and the
RandAugment of "Bug or Feature²" App. D.5, written from timm's formulas
(``timm/data/transforms.py``, ``auto_augment.py``, ``random_erasing.py``; timm is not used).

:class:`ImageTransform` turns a PIL image into a normalised ``(C, H, W)`` float32 array:

* ``crop="random-resized"``: timm's ``RandomResizedCropAndInterpolation`` (area 8-100 %,
  aspect 3/4-4/3 drawn log-uniformly, ten tries, else the central crop of the nearest allowed
  aspect), resized bicubically; ``crop="center"``: ADM's center crop
  (:func:`~actlab.data.image_folder.center_crop_arr`, "Bug or Feature²" App. D.1's "center-cropped
  and resized"); ``crop="resize-center"``: timm's evaluation transform (shorter side to
  ``image_size / 0.875``, bicubic, then the central square, offsets rounded);
* a horizontal flip with probability ``hflip``;
* RandAugment (:func:`rand_augment`) from a timm config string (``"rand-m9-mstd0.5-inc1"``:
  two ops a image, each applied with probability 0.5, magnitude drawn from N(9, 0.5) clipped
  to [0, 10], the "increasing" op set), or none (``""``);
* pixels to [0, 1], normalised by ``mean`` and ``std`` (ImageNet's by default);
* random erasing (timm's ``mode="pixel"``): with probability ``erase`` one box of 2-33 % of
  the area, log-uniform aspect 0.3-3.3, filled with standard normal noise per pixel.

Every random draw comes from the ``numpy.random.Generator`` passed in, so an image's
augmentation is a function of that generator's seed alone (the stream seeds it by run, step
and position in the global batch: the same however many processes read the batch).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["IMAGENET_MEAN", "IMAGENET_STD", "RAND_INCREASING_OPS", "RAND_OPS", "ImageTransform",
           "RandAugment", "erase_box", "rand_augment", "random_resized_crop_box"]

IMAGENET_MEAN = (0.485, 0.456, 0.406)  # timm's IMAGENET_DEFAULT_MEAN
IMAGENET_STD = (0.229, 0.224, 0.225)  # timm's IMAGENET_DEFAULT_STD
LEVEL_DENOM = 10.0  # timm's _LEVEL_DENOM: a magnitude M is the fraction M / 10 of each op's range
CROPS = ("random-resized", "center", "resize-center")


def _pil() -> Any:
    try:
        from PIL import Image, ImageEnhance, ImageOps
    except ImportError as exc:  # pillow is not a core dependency
        raise ImportError("image augmentation needs Pillow: pip install pillow") from exc
    return Image, ImageEnhance, ImageOps


def random_resized_crop_box(width: int, height: int, rng: np.random.Generator,
                            scale: tuple[float, float] = (0.08, 1.0),
                            ratio: tuple[float, float] = (3 / 4, 4 / 3)
                            ) -> tuple[int, int, int, int]:
    """``(top, left, h, w)`` of timm's random resized crop (module docstring)."""
    area = width * height
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target = rng.uniform(*scale) * area
        aspect = math.exp(rng.uniform(*log_ratio))
        w = int(round(math.sqrt(target * aspect)))
        h = int(round(math.sqrt(target / aspect)))
        if w <= width and h <= height:
            return int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1)), h, w
    in_ratio = width / height
    if in_ratio < min(ratio):
        w, h = width, int(round(width / min(ratio)))
    elif in_ratio > max(ratio):
        w, h = int(round(height * max(ratio))), height
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def erase_box(height: int, width: int, rng: np.random.Generator, *, min_area: float = 0.02,
              max_area: float = 1 / 3, min_aspect: float = 0.3) -> tuple[int, int, int, int] | None:
    """``(top, left, h, w)`` of timm's random-erasing box (ten tries; ``None`` if none fits)."""
    log_aspect = (math.log(min_aspect), math.log(1 / min_aspect))
    for _ in range(10):
        target = rng.uniform(min_area, max_area) * height * width
        aspect = math.exp(rng.uniform(*log_aspect))
        h = int(round(math.sqrt(target * aspect)))
        w = int(round(math.sqrt(target / aspect)))
        if w < width and h < height:
            return int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1)), h, w
    return None


# ------------------------------------------------------------------------ RandAugment
def _negate(value: float, rng: np.random.Generator) -> float:
    """timm's ``_randomly_negate``: the value or its negative, each with probability 1/2."""
    return -value if rng.random() > 0.5 else value


def _enhance(level: float, rng: np.random.Generator) -> float:
    return level / LEVEL_DENOM * 1.8 + 0.1  # [0.1, 1.9]


def _enhance_increasing(level: float, rng: np.random.Generator) -> float:
    return max(0.1, 1.0 + _negate(level / LEVEL_DENOM * 0.9, rng))  # away from 1


def _posterize(level: float, rng: np.random.Generator) -> int:
    return int(level / LEVEL_DENOM * 4)


def _solarize(level: float, rng: np.random.Generator) -> int:
    return min(256, int(level / LEVEL_DENOM * 256))


# name -> (level -> argument, (image, argument, fill) -> image); arguments as timm's LEVEL_TO_ARG
@functools.lru_cache(maxsize=1)
def _ops() -> dict[str, tuple[Callable | None, Callable]]:
    Image, ImageEnhance, ImageOps = _pil()
    bicubic, affine = Image.Resampling.BICUBIC, Image.Transform.AFFINE

    def transform(image: Any, matrix: tuple, fill: tuple) -> Any:
        return image.transform(image.size, affine, matrix, resample=bicubic, fillcolor=fill)

    def enhance(kind: Any) -> Callable:
        return lambda image, factor, fill: kind(image).enhance(factor)

    def solarize_add(image: Any, add: int, fill: tuple) -> Any:
        lut = [min(255, i + add) if i < 128 else i for i in range(256)]
        return image.point(lut * len(image.getbands()))

    def posterize(image: Any, bits: int, fill: tuple) -> Any:
        return image if bits >= 8 else ImageOps.posterize(image, bits)

    return {
        "AutoContrast": (None, lambda image, _, fill: ImageOps.autocontrast(image)),
        "Equalize": (None, lambda image, _, fill: ImageOps.equalize(image)),
        "Invert": (None, lambda image, _, fill: ImageOps.invert(image)),
        "Rotate": (lambda level, rng: _negate(level / LEVEL_DENOM * 30.0, rng),
                   lambda image, degrees, fill: image.rotate(degrees, resample=bicubic,
                                                             fillcolor=fill)),
        "Posterize": (_posterize, posterize),
        "PosterizeIncreasing": (lambda level, rng: 4 - _posterize(level, rng), posterize),
        "Solarize": (_solarize, lambda image, t, fill: ImageOps.solarize(image, t)),
        "SolarizeIncreasing": (lambda level, rng: 256 - _solarize(level, rng),
                               lambda image, t, fill: ImageOps.solarize(image, t)),
        "SolarizeAdd": (lambda level, rng: min(128, int(level / LEVEL_DENOM * 110)),
                        solarize_add),
        "Color": (_enhance, enhance(ImageEnhance.Color)),
        "ColorIncreasing": (_enhance_increasing, enhance(ImageEnhance.Color)),
        "Contrast": (_enhance, enhance(ImageEnhance.Contrast)),
        "ContrastIncreasing": (_enhance_increasing, enhance(ImageEnhance.Contrast)),
        "Brightness": (_enhance, enhance(ImageEnhance.Brightness)),
        "BrightnessIncreasing": (_enhance_increasing, enhance(ImageEnhance.Brightness)),
        "Sharpness": (_enhance, enhance(ImageEnhance.Sharpness)),
        "SharpnessIncreasing": (_enhance_increasing, enhance(ImageEnhance.Sharpness)),
        "ShearX": (lambda level, rng: _negate(level / LEVEL_DENOM * 0.3, rng),
                   lambda image, f, fill: transform(image, (1, f, 0, 0, 1, 0), fill)),
        "ShearY": (lambda level, rng: _negate(level / LEVEL_DENOM * 0.3, rng),
                   lambda image, f, fill: transform(image, (1, 0, 0, f, 1, 0), fill)),
        "TranslateXRel": (lambda level, rng: _negate(level / LEVEL_DENOM * 0.45, rng),
                          lambda image, pct, fill: transform(
                              image, (1, 0, pct * image.size[0], 0, 1, 0), fill)),
        "TranslateYRel": (lambda level, rng: _negate(level / LEVEL_DENOM * 0.45, rng),
                          lambda image, pct, fill: transform(
                              image, (1, 0, 0, 0, 1, pct * image.size[1]), fill)),
    }


# timm's _RAND_TRANSFORMS and _RAND_INCREASING_TRANSFORMS (Cutout is random erasing, apart)
RAND_OPS = ("AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "Solarize",
            "SolarizeAdd", "Color", "Contrast", "Brightness", "Sharpness", "ShearX", "ShearY",
            "TranslateXRel", "TranslateYRel")
RAND_INCREASING_OPS = ("AutoContrast", "Equalize", "Invert", "Rotate", "PosterizeIncreasing",
                       "SolarizeIncreasing", "SolarizeAdd", "ColorIncreasing",
                       "ContrastIncreasing", "BrightnessIncreasing", "SharpnessIncreasing",
                       "ShearX", "ShearY", "TranslateXRel", "TranslateYRel")


@dataclass(frozen=True)
class RandAugment:
    """``layers`` ops drawn uniformly with replacement from ``ops``, each applied with
    probability ``prob`` at magnitude ``magnitude`` (drawn from N(magnitude, ``magnitude_std``)
    when that is > 0, clipped to [0, 10]); ``fill`` colours the corners that geometric ops
    uncover (timm: the mean colour)."""

    ops: tuple[str, ...] = RAND_OPS
    layers: int = 2
    magnitude: float = 10.0
    magnitude_std: float = 0.0
    prob: float = 0.5
    fill: tuple[int, ...] = (124, 116, 104)

    def __call__(self, image: Any, rng: np.random.Generator) -> Any:
        """The augmented PIL image."""
        table = _ops()
        for name in rng.choice(self.ops, self.layers, replace=True):
            if self.prob < 1.0 and rng.random() > self.prob:
                continue
            magnitude = self.magnitude
            if self.magnitude_std > 0:
                magnitude = rng.normal(magnitude, self.magnitude_std)
            magnitude = max(0.0, min(magnitude, LEVEL_DENOM))
            level, op = table[str(name)]
            argument = level(magnitude, rng) if level is not None else None
            image = op(image, argument, self.fill[:len(image.getbands())])
        return image


@functools.lru_cache(maxsize=16)
def rand_augment(config: str, fill: tuple[int, ...] = (124, 116, 104)) -> RandAugment:
    """:class:`RandAugment` from timm's config string: ``rand`` then dash-separated ``mN``
    (magnitude, default 10), ``nN`` (ops a image, default 2), ``mstdX``, ``pX`` (default 0.5),
    ``incN`` (1: the increasing op set), e.g. ``"rand-m9-mstd0.5-inc1"``, ``"rand-n2-m9"``."""
    parts = str(config).split("-")
    if parts[0] != "rand":
        raise ValueError(f"a RandAugment config starts with 'rand', got {config!r}")
    values: dict[str, float] = {}
    for part in parts[1:]:
        match = re.fullmatch(r"(mstd|inc|m|n|p)(\d+(?:\.\d+)?)", part)
        if match is None:
            raise ValueError(f"unknown RandAugment section {part!r} in {config!r} (mN, nN, "
                             f"mstdX, pX, incN)")
        values[match.group(1)] = float(match.group(2))
    return RandAugment(ops=RAND_INCREASING_OPS if values.get("inc", 0) else RAND_OPS,
                       layers=int(values.get("n", 2)), magnitude=values.get("m", LEVEL_DENOM),
                       magnitude_std=values.get("mstd", 0.0), prob=values.get("p", 0.5),
                       fill=fill)


# ------------------------------------------------------------------------ the whole transform
@dataclass(frozen=True)
class ImageTransform:
    """A PIL image to a normalised ``(C, H, W)`` float32 array (module docstring). The
    default is the training transform of timm at DyT's settings; :meth:`evaluation` the
    matching evaluation transform."""

    image_size: int = 224
    crop: str = "random-resized"
    hflip: float = 0.5
    randaugment: str = "rand-m9-mstd0.5-inc1"
    erase: float = 0.25
    mean: tuple[float, ...] = IMAGENET_MEAN
    std: tuple[float, ...] = IMAGENET_STD

    def __post_init__(self) -> None:
        if self.crop not in CROPS:
            raise ValueError(f"crop must be one of {', '.join(CROPS)}, got {self.crop!r}")
        if self.image_size < 1 or not 0 <= self.hflip <= 1 or not 0 <= self.erase <= 1:
            raise ValueError(f"need image_size >= 1 and probabilities in [0, 1], got "
                             f"{self.image_size}, hflip={self.hflip}, erase={self.erase}")
        if self.randaugment:
            rand_augment(self.randaugment)  # refuse a bad config string now

    @property
    def random(self) -> bool:
        """Whether the transform draws anything (the training transforms do)."""
        return (self.crop == "random-resized" or self.hflip > 0 or bool(self.randaugment)
                or self.erase > 0)

    def evaluation(self) -> ImageTransform:
        """The deterministic transform of evaluation: timm's resize and central crop after a
        random resized crop, else the same crop; no flip, RandAugment or erasing."""
        crop = "resize-center" if self.crop == "random-resized" else self.crop
        return ImageTransform(self.image_size, crop, 0.0, "", 0.0, self.mean, self.std)

    def __call__(self, image: Any, rng: np.random.Generator | None = None) -> np.ndarray:
        """The transformed image; ``rng`` is needed when the transform draws."""
        Image, _, _ = _pil()
        if rng is None:
            if self.random:
                raise ValueError("this transform is random: pass its numpy Generator")
            rng = np.random.default_rng(0)
        size = self.image_size
        if self.crop == "random-resized":
            top, left, h, w = random_resized_crop_box(*image.size, rng)
            image = image.crop((left, top, left + w, top + h)).resize(
                (size, size), Image.Resampling.BICUBIC)
        elif self.crop == "center":
            from actlab.data.image_folder import center_crop_arr

            image = Image.fromarray(center_crop_arr(image, size))
        else:
            image = _resize_center(image, size)
        if self.hflip and rng.random() < self.hflip:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        if self.randaugment:
            fill = tuple(min(255, round(255 * m)) for m in self.mean)
            image = rand_augment(self.randaugment, fill)(image, rng)
        pixels = np.asarray(image, dtype=np.float32).reshape(size, size, -1) / 255.0
        mean = np.asarray(self.mean, dtype=np.float32)[:pixels.shape[-1]]
        std = np.asarray(self.std, dtype=np.float32)[:pixels.shape[-1]]
        out = np.ascontiguousarray(((pixels - mean) / std).transpose(2, 0, 1))
        if self.erase and rng.random() <= self.erase:  # timm skips when random() > prob
            box = erase_box(size, size, rng)
            if box is not None:
                top, left, h, w = box
                out[:, top:top + h, left:left + w] = rng.standard_normal(
                    (out.shape[0], h, w)).astype(np.float32)
        return out


def _resize_center(image: Any, size: int, crop_pct: float = 0.875) -> Any:
    """timm's evaluation resize: the shorter side to ``int(size / crop_pct)`` (the longer
    scaled and truncated, as torchvision's ``Resize``), bicubic, then the central
    ``size`` square (offsets rounded, as torchvision's ``CenterCrop``)."""
    Image, _, _ = _pil()
    short = int(size / crop_pct)
    width, height = image.size
    if width <= height:
        new = (short, int(short * height / width))
    else:
        new = (int(short * width / height), short)
    image = image.resize(new, Image.Resampling.BICUBIC)
    top = int(round((new[1] - size) / 2.0))
    left = int(round((new[0] - size) / 2.0))
    return image.crop((left, top, left + size, top + size))
