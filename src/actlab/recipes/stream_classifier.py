"""An image classifier trained on a folder too large for memory (ImageNet at the papers'
scale): :func:`train_on_stream` runs the engine's :class:`~actlab.train.loop.Trainer` on an
:class:`~actlab.data.image_stream.ImageStream`, :func:`evaluate_stream` measures loss and
accuracy on a split, and :func:`image_streams` builds the training and validation streams of
``ROOT/train`` and ``ROOT/val``.

Under data parallelism (``dist``) every rank reads only its part of each global batch
(``Trainer(sharded=True)``): the images, their augmentations and the Mixup / CutMix draw are
those of one process reading the whole batch (:mod:`actlab.data.image_stream`). With mixing
the targets are soft and the loss is the cross-entropy against them (``F.cross_entropy`` with
probabilities: timm's ``SoftTargetCrossEntropy``, which DyT's recipe trains with); without,
plain cross-entropy.
Evaluation sums loss and correct answers over each rank's share of the images and adds the
ranks' sums, so it equals one process's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from actlab.data.augment import ImageTransform
from actlab.data.image_stream import ImageStream, split_folders
from actlab.data.mixing import Mixing
from actlab.train.callbacks import Callback, EveryStep, LossHistory
from actlab.train.distributed import DistInfo, all_reduce_sum, wrap_model
from actlab.train.loop import STATUS_OK, Trainer, TrainResult
from actlab.train.settings import TrainSettings

__all__ = ["ImageStreams", "evaluate_stream", "image_streams", "train_on_stream"]


@dataclass
class ImageStreams:
    """The training stream (augmented, mixed) and the validation stream of a folder."""

    train: ImageStream
    val: ImageStream

    @property
    def num_classes(self) -> int:
        """Number of classes."""
        return self.train.num_classes

    def close(self) -> None:
        """Stop both streams' decoding threads."""
        self.train.close()
        self.val.close()


def image_streams(root: str | Path, transform: ImageTransform, *, batch_size: int, seed: int,
                  mixing: Callable[[int], Mixing] | None = None,
                  workers: int = 8) -> ImageStreams:
    """The streams of ``root/train`` (``transform``, ``mixing(classes)`` when given) and
    ``root/val`` (the transform's evaluation form; its classes must be the training split's)."""
    splits = split_folders(root)
    train = ImageStream(splits["train"], transform, batch_size=batch_size, seed=seed,
                        workers=workers)
    if mixing is not None:
        train.mixing = mixing(train.num_classes)
    val = ImageStream(splits["val"], transform.evaluation(), batch_size=batch_size, seed=seed,
                      workers=workers, classes=train.classes)
    return ImageStreams(train, val)


def train_on_stream(model: nn.Module, stream: ImageStream, settings: TrainSettings, *,
                    dist: DistInfo | None = None, callbacks: Sequence[Callback] = (),
                    on_step: Callable[[int, float], None] | None = None,
                    progress: Callable[..., Iterable] | None = None,
                    dtype: torch.dtype | None = None) -> TrainResult:
    """Train ``model`` in place for ``settings.steps`` updates on ``stream``'s batches
    (``settings.batch_size`` is the stream's global batch). ``on_step(step, loss)`` runs after
    each update with the 0-based step; a non-finite loss stops the run as ``diverged``.
    ``dtype``: the images (and soft targets) in that precision (a float64 model's)."""
    if settings.batch_size != stream.batch_size:
        raise ValueError(f"the settings' batch {settings.batch_size} is not the stream's "
                         f"{stream.batch_size}")
    rank, world = (dist.rank, dist.world_size) if dist is not None else (0, 1)

    def batch(step: int) -> tuple[Tensor, Tensor]:
        x, y = stream.batch(step, rank, world)
        if dtype is None:
            return x, y
        return x.to(dtype), (y.to(dtype) if y.is_floating_point() else y)

    def loss_fn(m: nn.Module, batch: tuple[Tensor, Tensor]) -> Tensor:
        # class labels, or soft targets (N, classes): -sum_c t_c log softmax_c, batch mean
        return F.cross_entropy(m(batch[0]), batch[1])

    history = LossHistory()
    extra = [] if on_step is None else [EveryStep(on_step, zero_based=True)]
    was_training = model.training
    try:
        trainer = Trainer(model if dist is None else wrap_model(model, dist),
                          settings, batch,
                          loss_fn=loss_fn, callbacks=[history, *callbacks, *extra],
                          progress=progress, dist=dist, sharded=True)
        result = trainer.fit()
    finally:
        model.train(was_training)
    result.losses = history.values()
    if result.status != STATUS_OK and result.history:
        result.losses.append(result.history[-1]["train_loss"])
    return result


@torch.no_grad()
def evaluate_stream(model: nn.Module, stream: ImageStream, *, batch_size: int = 256,
                    limit: int | None = None, dist: DistInfo | None = None) -> dict[str, float]:
    """Cross-entropy and accuracy of ``model`` (eval mode; its mode restored) on the first
    ``limit`` images of ``stream`` (all by default) through its evaluation transform."""
    rank, world = (dist.rank, dist.world_size) if dist is not None else (0, 1)
    device = next(model.parameters()).device
    sums = torch.zeros(3, dtype=torch.float64)  # loss sum, correct, count
    was_training = model.training
    model.eval()
    try:
        for x, y in stream.eval_batches(batch_size, rank, world, limit):
            x, y = x.to(device), y.to(device)
            logits = model(x.to(next(model.parameters()).dtype))
            sums += torch.tensor([float(F.cross_entropy(logits.float(), y, reduction="sum")),
                                  float((logits.argmax(-1) == y).sum()), len(y)],
                                 dtype=torch.float64)
    finally:
        model.train(was_training)
    if dist is not None:
        sums = all_reduce_sum(sums, dist)
    loss, correct, count = sums.tolist()
    return {"loss": loss / max(count, 1.0), "accuracy": correct / max(count, 1.0)}
