"""A folder of images with one sub-folder per class (the ImageNet / ImageFolder layout).

``root/<class>/<image>``: classes are the sub-folders sorted by name (label ``i`` is the
``i``-th name), images inside a class are sorted by file name. Files ending in ``.png``,
``.jpg``, ``.jpeg``, ``.bmp`` or ``.webp`` (any case) are read; other files and anything
whose name starts with ``.`` are skipped.

Every image is converted to RGB (``channels=3``) or greyscale (``channels=1``, PIL's ``L``)
and brought to ``image_size`` x ``image_size`` by the center crop of the ADM / DiT data
pipeline: halve the image with a box filter while its shorter side is at least twice
``image_size``, resize bicubically so that the shorter side is ``image_size`` (the longer
side rounded), then cut the central square (offsets rounded down). With
``center_crop=False`` the whole image is resized bicubically to the square instead (the
aspect ratio is not kept). Pixels ``p`` (0..255) become ``p / 127.5 - 1``, in [-1, 1].
PIL is imported only when a folder is loaded.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

__all__ = ["IMAGE_EXTENSIONS", "ImageFolderData", "center_crop_arr", "image_folder_batches",
           "image_folder_files", "image_folder_index", "load_image_folder"]

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".webp")


@dataclass
class ImageFolderData:
    """Images ``x`` ``(N, C, H, W)`` float32 in [-1, 1], labels ``y`` ``(N,)`` long."""

    x: Tensor
    y: Tensor
    classes: tuple[str, ...]
    files: tuple[Path, ...]

    @property
    def num_classes(self) -> int:
        """Number of class folders."""
        return len(self.classes)

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """``(C, H, W)`` of one image."""
        return tuple(self.x.shape[1:])  # type: ignore[return-value]

    def __len__(self) -> int:
        return int(self.x.shape[0])


def _pil() -> Any:
    try:
        from PIL import Image
    except ImportError as exc:  # pillow is not a core dependency
        raise ImportError("load_image_folder needs Pillow: pip install pillow") from exc
    return Image


def center_crop_arr(image: Any, image_size: int) -> np.ndarray:
    """ADM's center crop of a PIL image: box halvings, bicubic resize, central square."""
    Image = _pil()
    while min(*image.size) >= 2 * image_size:
        image = image.resize(tuple(s // 2 for s in image.size), resample=Image.BOX)
    scale = image_size / min(*image.size)
    image = image.resize(tuple(round(s * scale) for s in image.size), resample=Image.BICUBIC)
    arr = np.asarray(image)
    top = (arr.shape[0] - image_size) // 2
    left = (arr.shape[1] - image_size) // 2
    return arr[top:top + image_size, left:left + image_size]


def _visible(path: Path) -> bool:
    return not path.name.startswith(".")


def _class_files(root: Path, limit_per_class: int | None) -> tuple[list[str], list[list[Path]]]:
    if not root.exists():
        raise FileNotFoundError(f"image folder {root} does not exist")
    if not root.is_dir():
        raise NotADirectoryError(f"image folder {root} is not a directory")
    classes = sorted(p.name for p in root.iterdir() if p.is_dir() and _visible(p))
    if not classes:
        raise ValueError(f"image folder {root} has no class sub-folders (expected "
                         f"{root}/<class>/<image>)")
    files = []
    for name in classes:
        found = sorted(p for p in (root / name).iterdir()
                       if p.is_file() and _visible(p) and p.suffix.lower() in IMAGE_EXTENSIONS)
        if not found:
            raise ValueError(f"class folder {root / name} holds no images (extensions "
                             f"{', '.join(IMAGE_EXTENSIONS)})")
        files.append(found[:limit_per_class])
    return classes, files


def _read(path: Path, image_size: int, mode: str, center_crop: bool) -> np.ndarray:
    Image = _pil()
    try:
        with Image.open(path) as image:
            image = image.convert(mode)
    except (OSError, ValueError, Image.DecompressionBombError) as exc:
        raise ValueError(f"cannot read image {path}: {exc}") from None
    if center_crop:
        arr = center_crop_arr(image, image_size)
    else:
        arr = np.asarray(image.resize((image_size, image_size), resample=Image.BICUBIC))
    return arr.reshape(image_size, image_size, -1)


def load_image_folder(root: str | Path, *, image_size: int, channels: int = 3,
                      limit_per_class: int | None = None,
                      center_crop: bool = True) -> ImageFolderData:
    """Every image under ``root/<class>/`` as :class:`ImageFolderData` (see the module doc).

    ``limit_per_class`` keeps the first images (by file name) of each class. Raises
    ``FileNotFoundError`` for a missing ``root`` and ``ValueError`` for bad arguments, a
    folder without class sub-folders, a class without images, or an unreadable image (each
    naming the path).
    """
    if image_size < 1:
        raise ValueError(f"image_size must be >= 1, got {image_size}")
    if channels not in (1, 3):
        raise ValueError(f"channels must be 1 or 3, got {channels}")
    if limit_per_class is not None and limit_per_class < 1:
        raise ValueError(f"limit_per_class must be >= 1 or None, got {limit_per_class}")
    root = Path(root).expanduser()
    classes, per_class = _class_files(root, limit_per_class)
    paths = [path for files in per_class for path in files]
    labels = [label for label, files in enumerate(per_class) for _ in files]
    pixels = np.empty((len(paths), image_size, image_size, channels), dtype=np.uint8)
    mode = "RGB" if channels == 3 else "L"
    for i, path in enumerate(paths):
        pixels[i] = _read(path, image_size, mode, center_crop)
    x = torch.from_numpy(pixels).permute(0, 3, 1, 2).to(torch.float32) / 127.5 - 1.0
    return ImageFolderData(x.contiguous(), torch.tensor(labels, dtype=torch.long),
                           tuple(classes), tuple(paths))


def image_folder_files(root: str | Path, limit_per_class: int | None = None) -> list[Path]:
    """The image files :func:`load_image_folder` reads, in its order (class by class)."""
    _, per_class = _class_files(Path(root).expanduser(), limit_per_class)
    return [path for files in per_class for path in files]


def image_folder_index(root: str | Path) -> tuple[tuple[str, ...], list[Path], list[int]]:
    """``(classes, files, labels)`` of a class-per-folder tree, in :func:`load_image_folder`'s
    order, without reading an image (its errors for a bad folder)."""
    classes, per_class = _class_files(Path(root).expanduser(), None)
    files = [path for paths in per_class for path in paths]
    labels = [label for label, paths in enumerate(per_class) for _ in paths]
    return tuple(classes), files, labels


def image_folder_batches(root: str | Path, *, image_size: int, batch_size: int,
                         channels: int = 3, limit_per_class: int | None = None,
                         center_crop: bool = True) -> Iterator[Tensor]:
    """The images of :func:`load_image_folder`, in the same order and form, as batches of at
    most ``batch_size`` ``(n, C, H, W)`` float32 tensors in [-1, 1], read as they are needed
    (a folder larger than memory, e.g. the reference set of an FID)."""
    if batch_size < 1 or channels not in (1, 3):
        raise ValueError(f"need batch_size >= 1 and channels 1 or 3, got {batch_size}, {channels}")
    paths = image_folder_files(root, limit_per_class)
    mode = "RGB" if channels == 3 else "L"
    for start in range(0, len(paths), batch_size):
        pixels = np.stack([_read(path, image_size, mode, center_crop)
                           for path in paths[start:start + batch_size]])
        yield torch.from_numpy(pixels).permute(0, 3, 1, 2).to(torch.float32) / 127.5 - 1.0
