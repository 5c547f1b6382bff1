"""Training losses by explicit name: each name says its reduction.

Every loss is called as ``loss(output, target) -> scalar`` for one model (the ensemble
engine vmaps it over members). The names:

* ``mse_mean``: mean of ``(output - target)**2`` over every element (``F.mse_loss``);
* ``half_sse``: ``0.5 * ||output - target||**2`` per example (sum over every dim but the
  first), averaged over the batch (the textbook quadratic cost);
* ``cross_entropy``: ``F.cross_entropy`` with integer labels or class probabilities;
* ``soft_cross_entropy``: the same call, named for probability targets (a teacher's softmax);
* ``bce_logits``: mean binary cross-entropy of a sigmoid output, from its net input.

A bare ``"mse"`` means ``mse_mean`` and ``"soft_ce"`` means ``soft_cross_entropy``
(:data:`ALIASES`); every config should name the loss it really uses.
"""

from __future__ import annotations

from collections.abc import Callable

import torch.nn.functional as F
from torch import Tensor

from actlab.errors import ConfigError, did_you_mean

LossFn = Callable[[Tensor, Tensor], Tensor]


def mse_mean(output: Tensor, target: Tensor) -> Tensor:
    """Mean squared error over all elements (the value of ``F.mse_loss``)."""
    return F.mse_loss(output, target)


def half_sse(output: Tensor, target: Tensor) -> Tensor:
    """``0.5 * sum((output - target)**2)`` over each example (every dim but the first),
    mean over the batch."""
    return 0.5 * (output - target).pow(2).flatten(1).sum(1).mean()


def half_sse_to_mse_mean(value: float, example_size: int) -> float:
    """A ``half_sse`` value as the ``mse_mean`` of the same batch (``example_size`` elements
    per example): ``2 * value / example_size``."""
    return 2 * value / example_size


def cross_entropy(output: Tensor, target: Tensor) -> Tensor:
    """Softmax cross-entropy of logits against integer labels or class probabilities."""
    return F.cross_entropy(output, target)


def soft_cross_entropy(output: Tensor, target: Tensor) -> Tensor:
    """Softmax cross-entropy against class probabilities (e.g. a teacher's softmax)."""
    return F.cross_entropy(output, target)


def bce_logits(output: Tensor, target: Tensor) -> Tensor:
    """Mean cross-entropy of a sigmoid output computed from its net input (stays finite)."""
    return F.binary_cross_entropy_with_logits(output.reshape(-1), target.reshape(-1))


LOSSES: dict[str, LossFn] = {
    "mse_mean": mse_mean,
    "half_sse": half_sse,
    "cross_entropy": cross_entropy,
    "soft_cross_entropy": soft_cross_entropy,
    "bce_logits": bce_logits,
}
ALIASES: dict[str, str] = {"mse": "mse_mean", "soft_ce": "soft_cross_entropy"}


def canonical_loss(name: str, field: str = "loss") -> str:
    """The explicit name of ``name`` (aliases resolved); :class:`ConfigError` naming ``field``."""
    name = ALIASES.get(name, name)
    if name not in LOSSES:
        valid = [*LOSSES, *ALIASES]
        hint = did_you_mean(str(name), valid, n=3, suffix=" ")
        raise ConfigError(field, f"unknown loss {name!r}; {hint}valid: {', '.join(valid)}")
    return name


def get_loss(name: str, field: str = "loss") -> LossFn:
    """The loss function called ``name`` (see the module docstring for the names)."""
    return LOSSES[canonical_loss(name, field)]
