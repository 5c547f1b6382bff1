"""Supervised training of a small model on in-memory tensors, through the engine.

:func:`train` runs the :class:`~actlab.train.loop.Trainer` for ``settings.steps`` updates
over ``(x, y)`` in seeded epochs (:class:`~actlab.data.sampling.EpochBatches`), with the loss
``settings.loss`` names (:mod:`actlab.nn.losses`), and stops, recording the run as
``diverged``, at the first non-finite loss instead of raising. :func:`evaluate` reports loss
and accuracy. Measuring a trained classifier's activations is the image classifier recipe's
(:mod:`actlab.recipes.image_classifier`).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterable, Iterator, Sequence

import torch
from torch import Tensor, nn

from actlab.data.sampling import EpochBatches
from actlab.device import to_model_device
from actlab.nn.losses import canonical_loss, get_loss
from actlab.train.callbacks import Callback, EveryStep, LossHistory
from actlab.train.distributed import DistInfo, wrap_model
from actlab.train.loop import STATUS_DIVERGED, STATUS_OK, Trainer, TrainResult
from actlab.train.settings import TrainSettings

__all__ = ["STATUS_DIVERGED", "STATUS_OK", "TrainResult", "evaluate", "torch_threads", "train"]


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run the block with ``n`` intra-op threads (``None``: unchanged), then restore.

    Small models train fastest on one thread: their matrix products are too small to
    share, and on a busy machine extra threads mostly spin.
    """
    previous = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def train(model: nn.Module, x: Tensor, y: Tensor, settings: TrainSettings, *,
          generator: torch.Generator, on_step: Callable[[int, float], None] | None = None,
          callbacks: Sequence[Callback] = (),
          progress: Callable[..., Iterable] | None = None,
          loss_fn: Callable[[nn.Module, tuple[Tensor, Tensor]], Tensor] | None = None,
          dist: DistInfo | None = None) -> TrainResult:
    """Train ``model`` in place on ``(x, y)``; see the module docstring.

    ``loss_fn(model, (x, y))`` replaces the default ``settings.loss`` of ``model(x)`` and
    ``y`` (e.g. a diffusion loss, which draws its own noise).
    The model is put in training mode for the run and its previous mode is restored.
    ``on_step(step, loss)`` runs after each update with the 0-based step (it synchronises
    every step; ``callbacks`` fire on their own schedules). ``progress`` wraps the steps.
    The result's ``losses`` hold every update's batch loss (and the non-finite one that
    stopped a diverged run). With ``dist`` (a data-parallel rank) the model trains under DDP:
    every rank draws the same global batch and keeps its rows, and the losses reported are
    the global batch's.
    """
    if loss_fn is None:
        criterion = get_loss(settings.loss)

        def loss_fn(m: nn.Module, b: tuple[Tensor, Tensor]) -> Tensor:
            return criterion(m(b[0]), b[1])

    # One log line at the end: the engine then never reads the loss back between steps.
    config = dataclasses.replace(settings, log_every=max(1, settings.steps), eval_every=0,
                                 checkpoint_every=0)
    order = EpochBatches(len(x), settings.batch_size, generator)

    def batch(step: int) -> tuple[Tensor, Tensor]:
        idx = order(step)
        return x[idx], y[idx]

    history = LossHistory()
    extra = [] if on_step is None else [EveryStep(on_step, zero_based=True)]
    was_training = model.training
    try:
        trainer = Trainer(model if dist is None else wrap_model(model, dist), config, batch,
                          loss_fn=loss_fn, callbacks=[history, *callbacks, *extra],
                          progress=progress, dist=dist)
        result = trainer.fit()
    finally:
        model.train(was_training)
    result.losses = history.values()
    if result.status != STATUS_OK:
        result.losses.append(result.history[-1]["train_loss"])
    return result


@torch.no_grad()
def evaluate(model: nn.Module, x: Tensor, y: Tensor, *, loss: str = "cross_entropy",
             batch_size: int = 512) -> dict[str, float]:
    """Loss and (for cross-entropy) accuracy on ``(x, y)`` in eval mode; the mode is restored."""
    name = canonical_loss(loss)
    criterion = get_loss(name)
    was_training = model.training
    model.eval()
    total, correct, n = 0.0, 0, 0
    try:
        for start in range(0, len(x), batch_size):
            inputs, target = to_model_device(model, x[start:start + batch_size],
                                             y[start:start + batch_size])
            out = model(inputs)
            total += float(criterion(out, target)) * len(target)
            if name == "cross_entropy":
                correct += int((out.argmax(-1) == target).sum())
            n += len(target)
    finally:
        model.train(was_training)
    metrics = {"loss": total / n}
    if name == "cross_entropy":
        metrics["accuracy"] = correct / n
    return metrics
