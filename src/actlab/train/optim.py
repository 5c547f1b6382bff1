"""One optimizer factory for both engines: a name builds a ``torch.optim`` optimizer for the
single-model :class:`~actlab.train.loop.Trainer` or the matching functional optimizer for the
:class:`~actlab.train.ensemble.EnsembleTrainer`, with the same update (tested equal).

Names: ``sgd`` (plain), ``momentum`` (heavy ball), ``nesterov``, ``adam`` (L2 weight decay
added to the gradient) and ``adamw`` (decoupled weight decay).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from actlab.errors import ConfigError, did_you_mean
from actlab.train.functional_optim import FunctionalAdam, FunctionalOptimizer, FunctionalSGD

OPTIMIZERS = ("sgd", "momentum", "nesterov", "adam", "adamw")


def _check(name: str) -> str:
    if name not in OPTIMIZERS:
        hint = did_you_mean(str(name), OPTIMIZERS, n=3, suffix=" ")
        raise ConfigError("optimizer", f"unknown {name!r}; {hint}valid: {', '.join(OPTIMIZERS)}")
    return name


def make_optimizer(name: str, params: Iterable[Any], lr: float, *, momentum: float = 0.9,
                   weight_decay: float = 0.0,
                   betas: tuple[float, float] = (0.9, 0.999)) -> torch.optim.Optimizer:
    """The ``torch.optim`` optimizer called ``name`` over ``params`` (tensors or param groups)."""
    _check(name)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, weight_decay=weight_decay)
    if name in ("momentum", "nesterov"):
        return torch.optim.SGD(params, lr=lr, momentum=momentum, nesterov=name == "nesterov",
                               weight_decay=weight_decay)
    cls = torch.optim.Adam if name == "adam" else torch.optim.AdamW
    return cls(params, lr=lr, betas=betas, weight_decay=weight_decay)


def make_functional_optimizer(name: str, lr: float, *, momentum: float = 0.9,
                              weight_decay: float = 0.0,
                              betas: tuple[float, float] = (0.9, 0.999),
                              fused: bool | None = None) -> FunctionalOptimizer:
    """The functional (stacked-parameter) optimizer called ``name``; see :func:`make_optimizer`.

    ``fused`` chooses Adam's kernel (see :class:`~actlab.train.functional_optim.FunctionalAdam`).
    """
    _check(name)
    if name == "sgd":
        return FunctionalSGD(lr=lr, weight_decay=weight_decay)
    if name in ("momentum", "nesterov"):
        return FunctionalSGD(lr=lr, momentum=momentum, nesterov=name == "nesterov",
                             weight_decay=weight_decay)
    return FunctionalAdam(lr=lr, betas=betas, weight_decay=weight_decay,
                          decoupled=name == "adamw", fused=fused)


def optimizer_for(settings: Any, params: Iterable[Any]) -> torch.optim.Optimizer:
    """:func:`make_optimizer` with the hyper-parameters of a :class:`TrainSettings`."""
    return make_optimizer(settings.optimizer, params, settings.lr, momentum=settings.momentum,
                          weight_decay=settings.weight_decay,
                          betas=(settings.beta1, settings.beta2))


def functional_optimizer_for(settings: Any) -> FunctionalOptimizer:
    """:func:`make_functional_optimizer` with the hyper-parameters of a :class:`TrainSettings`."""
    return make_functional_optimizer(settings.optimizer, settings.lr, momentum=settings.momentum,
                                     weight_decay=settings.weight_decay,
                                     betas=(settings.beta1, settings.beta2))
