"""The engine's calling convention for a loss: ``loss_fn(model, batch) -> scalar``.

A batch is a tuple of tensors; :func:`default_loss` is a language model's (called as
``model(x, targets=y)``, returning ``(logits, loss)``). :class:`~actlab.train.loop.Trainer`
and :func:`~actlab.train.timing.measure_step` take any ``loss_fn`` of this shape. (The
losses by name, ``loss(output, target)``, are :mod:`actlab.nn.losses`.)
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor, nn

__all__ = ["Batch", "LossFn", "default_loss"]

Batch = tuple[Tensor, ...]
LossFn = Callable[[nn.Module, Batch], Tensor]


def default_loss(model: nn.Module, batch: Batch) -> Tensor:
    """Loss of a language model called as ``model(x, targets=y)`` returning ``(logits, loss)``."""
    x, y = batch
    return model(x, targets=y)[1]
