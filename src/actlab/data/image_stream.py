"""An image folder read batch by batch as training needs it: ImageNet at the papers' scale,
which no memory holds.

The layout is torchvision's ``ImageFolder`` per split, as the DyT code that "Rethinking
Activation Functions" §4.1 follows reads ImageNet (``datasets.py``: ``ROOT/train`` and
``ROOT/val``): ``ROOT/<split>/<class>/<image>``, classes the sorted sub-folder names
(:func:`~actlab.data.image_folder.image_folder_index`). :func:`split_folders` finds the two
splits; :class:`ImageStream` reads one.

``batch(step)`` is a function of the step alone (a resumed run reads what an uninterrupted one
would): each epoch is a permutation of the images drawn from ``(seed, epoch)``, cut into
``len // batch_size`` batches (the last partial batch is dropped, as a ``drop_last`` loader),
and image ``k`` of step ``t``'s global batch is augmented with a generator seeded by
``(seed, t, k)``, so its pixels do not depend on how many processes share the batch;
``batch(step, rank, world_size)`` reads only the rank's contiguous part. Mixup / CutMix
(:class:`~actlab.data.mixing.Mixing`) draw once per step from ``(seed, step)``. Images are
decoded in ``workers`` threads (Pillow releases the GIL while it decodes and resizes).
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from actlab.data.augment import ImageTransform
from actlab.data.image_folder import image_folder_index
from actlab.data.mixing import Mixing

__all__ = ["ImageStream", "split_folders"]

SPLITS = ("train", "val")


def split_folders(root: str | Path) -> dict[str, Path]:
    """``{"train": ROOT/train, "val": ROOT/val}``; ``FileNotFoundError`` naming what is
    missing (the layout the module docstring describes)."""
    root = Path(root).expanduser()
    found = {split: root / split for split in SPLITS}
    missing = [str(path) for path in found.values() if not path.is_dir()]
    if missing:
        raise FileNotFoundError(f"image folder {root}: no {' or '.join(missing)} (expected "
                                f"{root}/train/<class>/<image> and {root}/val/<class>/<image>)")
    return found


def _read_rgb(path: Path) -> Any:
    from PIL import Image

    try:
        with Image.open(path) as image:
            return image.convert("RGB")
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read image {path}: {exc}") from None


class ImageStream:
    """One split of an image folder, read a batch at a time (module docstring).

    ``transform`` makes each image an array; ``mixing`` (training only) mixes each batch and
    makes its targets soft; ``classes`` fixes the class names (a validation split must have
    the training split's classes).
    """

    def __init__(self, root: str | Path, transform: ImageTransform, *, batch_size: int,
                 seed: int = 0, mixing: Mixing | None = None, workers: int = 8,
                 classes: tuple[str, ...] | None = None) -> None:
        if batch_size < 1 or workers < 1:
            raise ValueError(f"need batch_size >= 1 and workers >= 1, got {batch_size}, {workers}")
        self.root = Path(root).expanduser()
        self.classes, self.files, labels = image_folder_index(self.root)
        if classes is not None and tuple(classes) != self.classes:
            raise ValueError(f"{self.root}: its classes differ from the training split's "
                             f"({len(self.classes)} against {len(classes)})")
        self.labels = np.asarray(labels, dtype=np.int64)
        self.transform, self.mixing = transform, mixing
        self.batch_size, self.seed, self.workers = batch_size, seed, workers
        self._pool: ThreadPoolExecutor | None = None

    @property
    def num_classes(self) -> int:
        """Number of class folders."""
        return len(self.classes)

    def __len__(self) -> int:
        return len(self.files)

    @property
    def steps_per_epoch(self) -> int:
        """Full batches in one pass over the images (at least one)."""
        return max(1, len(self) // self.batch_size)

    def rows(self, step: int) -> np.ndarray:
        """Indices of the images of step ``step``'s global batch."""
        epoch, k = divmod(step, self.steps_per_epoch)
        order = np.random.default_rng([self.seed, epoch, 2]).permutation(len(self))
        rows = order[k * self.batch_size:(k + 1) * self.batch_size]
        if len(rows) < self.batch_size:  # fewer images than one batch: wrap around
            rows = np.resize(order, self.batch_size)
        return rows

    def _images(self, rows: np.ndarray, rngs: list[np.random.Generator | None],
                transform: ImageTransform) -> Tensor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="actlab-images")
        arrays = list(self._pool.map(lambda job: transform(_read_rgb(self.files[job[0]]), job[1]),
                                     zip(rows, rngs)))
        return torch.from_numpy(np.stack(arrays))

    def batch(self, step: int, rank: int = 0, world_size: int = 1) -> tuple[Tensor, Tensor]:
        """``(images, targets)`` of the rank's part of step ``step``'s global batch: labels
        ``(n,)``, or soft targets ``(n, classes)`` with mixing."""
        if self.batch_size % world_size:
            raise ValueError(f"global batch {self.batch_size} is not divisible by world size "
                             f"{world_size}")
        per = self.batch_size // world_size
        first = rank * per
        rows = self.rows(step)[first:first + per]
        rngs = [np.random.default_rng([self.seed, step, 0, first + k]) for k in range(len(rows))]
        x = self._images(rows, rngs, self.transform)
        y = torch.from_numpy(self.labels[rows])
        if self.mixing is None:
            return x, y
        if first % 2 or per % 2:
            raise ValueError(f"mixing pairs rows 2k and 2k + 1: each rank's part must start at "
                             f"an even row and be even (batch {self.batch_size}, {world_size} "
                             f"ranks)")
        rng = np.random.default_rng([self.seed, step, 1])
        draw = self.mixing.draw(rng, x.shape[-2], x.shape[-1])
        return self.mixing(x, y, rng, draw)

    def eval_batches(self, batch_size: int, rank: int = 0, world_size: int = 1,
                     limit: int | None = None) -> Iterator[tuple[Tensor, Tensor]]:
        """All images in folder order, or ``limit`` of them spread evenly over it (every
        class then counts), the rank's share (every ``world_size``-th from ``rank``), as
        ``(images, labels)`` batches of at most ``batch_size``, through the transform's
        evaluation form."""
        transform = self.transform.evaluation()
        n = len(self)
        rows = np.arange(n) if limit is None or limit >= n else (np.arange(limit) * n) // limit
        rows = rows[rank::world_size]
        for start in range(0, len(rows), batch_size):
            part = rows[start:start + batch_size]
            yield (self._images(part, [None] * len(part), transform),
                   torch.from_numpy(self.labels[part]))

    def close(self) -> None:
        """Stop the decoding threads."""
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None
