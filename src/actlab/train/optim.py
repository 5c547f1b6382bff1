"""One optimizer factory for both engines: a name builds a ``torch.optim`` optimizer for the
single-model :class:`~actlab.train.loop.Trainer` or the matching functional optimizer for the
:class:`~actlab.train.ensemble.EnsembleTrainer`, with the same update (tested equal).

Names: ``sgd`` (plain), ``momentum`` (heavy ball), ``nesterov``, ``adam`` (L2 weight decay
added to the gradient) and ``adamw`` (decoupled weight decay), in both engines; ``muon``
(:func:`make_muon`, ``torch.optim.Muon`` on the hidden weight matrices and AdamW on every
other parameter, the split of "Bug or Feature²" App. D.6) in the single-model engine only:
the :class:`~actlab.train.ensemble.EnsembleTrainer` has no functional Muon and refuses it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from actlab.errors import ConfigError, did_you_mean
from actlab.train.functional_optim import FunctionalAdam, FunctionalOptimizer, FunctionalSGD
from actlab.train.muon import MUON, check_muon_available, make_muon

# The optimizers of both engines; the single-model Trainer also takes ``muon``.
OPTIMIZERS = ("sgd", "momentum", "nesterov", "adam", "adamw")
TRAINER_OPTIMIZERS = (*OPTIMIZERS, MUON)


def _check(name: str, valid: tuple[str, ...] = TRAINER_OPTIMIZERS) -> str:
    if name == MUON and valid == OPTIMIZERS:
        raise ConfigError("optimizer", "muon runs in the single-model Trainer only: the "
                                       "EnsembleTrainer has no functional Muon")
    if name not in valid:
        hint = did_you_mean(str(name), valid, n=3, suffix=" ")
        raise ConfigError("optimizer", f"unknown {name!r}; {hint}valid: {', '.join(valid)}")
    if name == MUON:
        check_muon_available()
    return name


def make_optimizer(name: str, params: Iterable[Any], lr: float, *, momentum: float = 0.9,
                   weight_decay: float = 0.0,
                   betas: tuple[float, float] = (0.9, 0.999)) -> Any:
    """The ``torch.optim`` optimizer called ``name`` over ``params`` (tensors or param groups).

    ``muon`` takes param groups as :func:`~actlab.train.muon.muon_groups` marks them (or plain
    tensors: the 2-D ones go to Muon) and returns a
    :class:`~actlab.train.muon.CombinedOptimizer`; see :func:`~actlab.train.muon.make_muon`
    for its own hyper-parameters (the defaults here).
    """
    _check(name)
    if name == MUON:
        return make_muon(params, lr, weight_decay=weight_decay, betas=betas)
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
    ``muon`` raises a :class:`~actlab.errors.ConfigError` (no functional Muon).
    """
    _check(name, OPTIMIZERS)
    if name == "sgd":
        return FunctionalSGD(lr=lr, weight_decay=weight_decay)
    if name in ("momentum", "nesterov"):
        return FunctionalSGD(lr=lr, momentum=momentum, nesterov=name == "nesterov",
                             weight_decay=weight_decay)
    return FunctionalAdam(lr=lr, betas=betas, weight_decay=weight_decay,
                          decoupled=name == "adamw", fused=fused)


def optimizer_for(settings: Any, params: Iterable[Any]) -> Any:
    """:func:`make_optimizer` with the hyper-parameters of a :class:`TrainSettings` (Muon's
    from its ``muon_*`` fields)."""
    if settings.optimizer == MUON:
        _check(MUON)
        decay = settings.weight_decay if settings.muon_weight_decay is None \
            else settings.muon_weight_decay
        return make_muon(params, settings.lr, weight_decay=settings.weight_decay,
                         betas=(settings.beta1, settings.beta2),
                         lr_ratio=settings.muon_lr_ratio, momentum=settings.muon_momentum,
                         nesterov=settings.muon_nesterov, ns_steps=settings.muon_ns_steps,
                         muon_weight_decay=decay, ns_dtype=settings.muon_ns_dtype)
    return make_optimizer(settings.optimizer, params, settings.lr, momentum=settings.momentum,
                          weight_decay=settings.weight_decay,
                          betas=(settings.beta1, settings.beta2))


def functional_optimizer_for(settings: Any) -> FunctionalOptimizer:
    """:func:`make_functional_optimizer` with the hyper-parameters of a :class:`TrainSettings`."""
    return make_functional_optimizer(settings.optimizer, settings.lr, momentum=settings.momentum,
                                     weight_decay=settings.weight_decay,
                                     betas=(settings.beta1, settings.beta2))
