"""The one settings type of the training engine, shared by every experiment config.

:class:`TrainSettings` holds how to train: optimizer, learning rate and schedule, steps,
batch size, loss, dtype, device and seed (plus the few hyper-parameters the optimizers and
the single-model :class:`~actlab.train.loop.Trainer` read). Experiment configs keep their flat
fields (so every ``--set field=value`` name stays as it was) and build their settings with
:func:`settings_from`, which takes every field the config shares with :class:`TrainSettings`.

Example::

    settings = settings_from(config, loss="half_sse")   # config.lr, config.steps, ...
    result = train(model, x, y, settings, generator=torch.Generator().manual_seed(0))
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import torch

from actlab.config import choose
from actlab.errors import ConfigError
from actlab.nn.losses import canonical_loss
from actlab.train.muon import MUON, NS_DTYPES, check_muon_available
from actlab.train.optim import TRAINER_OPTIMIZERS

SCHEDULES = ("cosine", "linear", "constant", "trapezoid", "onecycle")
DTYPES = ("float32", "float64", "bfloat16")
TORCH_DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16}


@dataclass
class TrainSettings:
    """How to train (see the module docstring). Defaults: Adam 1e-3, constant rate, no clipping.

    ``decay_vectors=False`` keeps weight decay off biases and norm gains (parameters of
    fewer than 2 dims). ``schedule="trapezoid"``: linear warm-up over ``warmup`` steps, constant,
    linear warm-down to 0 over the last ``warmdown`` steps ("Bug or Feature²" App. D.6;
    ``warmdown`` belongs to it alone). ``warmup_from``: the linear warm-up starts at this
    fraction of ``lr`` (0: from nothing, "Bug or Feature²" App. D.3 warms from 1e-4 to 1e-3).
    ``schedule="onecycle"``: PyTorch's ``OneCycleLR`` at its defaults (a cosine rise from
    ``lr / 25`` to ``lr`` over the first 30 % of the steps, a cosine fall to ``lr / 25 / 1e4``;
    it has its own rise, so ``warmup`` must be 0; its momentum cycle is not applied).
    ``optimizer="muon"`` (single-model
    :class:`~actlab.train.loop.Trainer` only): AdamW with ``lr``, ``beta1``, ``beta2``,
    ``weight_decay`` on embeddings, head, norms and biases, Muon (a ``torch.optim.Muon``) on
    the hidden matrices with the ``muon_*`` fields (:mod:`actlab.train.muon`; ``muon_weight_decay`` ``None``
    is ``weight_decay``; ``muon_ns_dtype`` ``auto`` orthogonalises in bfloat16 on CUDA, float32
    on the CPU). ``device`` ``None`` is the unit's device
    (:func:`~actlab.train.placement.unit_device`, the CPU outside a run). ``eval_every``, ``log_every``, ``checkpoint_every`` and ``compile``
    are read by the single-model :class:`~actlab.train.loop.Trainer`.
    """

    optimizer: str = "adam"
    lr: float = 1e-3
    momentum: float = 0.9
    weight_decay: float = 0.0
    beta1: float = 0.9
    beta2: float = 0.999
    schedule: str = "constant"
    warmup: int = 0
    warmdown: int = 0
    warmup_from: float = 0.0
    min_lr_ratio: float = 0.1
    grad_clip: float = 0.0
    decay_vectors: bool = True
    muon_lr_ratio: float = 0.1
    muon_momentum: float = 0.95
    muon_nesterov: bool = True
    muon_ns_steps: int = 5
    muon_weight_decay: float | None = None
    muon_ns_dtype: str = "auto"
    steps: int = 500
    batch_size: int = 128
    loss: str = "cross_entropy"
    dtype: str = "float32"
    device: str | None = None
    seed: int = 0
    eval_every: int = 0
    log_every: int = 1
    checkpoint_every: int = 0
    compile: bool = False

    def __post_init__(self) -> None:
        choose("optimizer", self.optimizer, TRAINER_OPTIMIZERS)
        choose("schedule", self.schedule, SCHEDULES)
        choose("dtype", self.dtype, DTYPES)
        canonical_loss(self.loss)
        if not self.lr > 0:
            raise ConfigError("lr", f"must be > 0, got {self.lr}")
        for name in ("steps", "warmup", "warmdown", "eval_every", "log_every",
                     "checkpoint_every"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ConfigError(name, f"must be an integer >= 0, got {value!r}")
        if self.log_every < 1:
            raise ConfigError("log_every", f"must be >= 1, got {self.log_every}")
        if self.batch_size < 1:
            raise ConfigError("batch_size", f"must be >= 1, got {self.batch_size}")
        if not 0.0 <= self.warmup_from <= 1.0:
            raise ConfigError("warmup_from", f"must be in [0, 1], got {self.warmup_from}")
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ConfigError("min_lr_ratio", f"must be in [0, 1], got {self.min_lr_ratio}")
        for name in ("beta1", "beta2"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ConfigError(name, f"must be in [0, 1), got {getattr(self, name)}")
        for name in ("momentum", "weight_decay", "grad_clip"):
            if getattr(self, name) < 0:
                raise ConfigError(name, f"must be >= 0, got {getattr(self, name)}")
        self._check_schedule()
        self._check_muon()

    def _check_schedule(self) -> None:
        if self.warmdown and self.schedule != "trapezoid":
            raise ConfigError("warmdown", f"only the trapezoid schedule has a warm-down (schedule "
                                          f"is {self.schedule!r}), got {self.warmdown}")
        if self.schedule == "onecycle" and self.warmup:
            raise ConfigError("warmup", f"the onecycle schedule rises on its own (the first 30 % "
                                        f"of the steps); got warmup={self.warmup}")
        if self.schedule == "trapezoid" and self.warmup + self.warmdown > self.steps:
            raise ConfigError("warmdown", f"warmup + warmdown = {self.warmup + self.warmdown} "
                                          f"exceeds steps = {self.steps}")

    def _check_muon(self) -> None:
        if self.optimizer == MUON:
            check_muon_available()
        if not self.muon_lr_ratio > 0:
            raise ConfigError("muon_lr_ratio", f"must be > 0, got {self.muon_lr_ratio}")
        if not 0.0 <= self.muon_momentum < 1.0:
            raise ConfigError("muon_momentum", f"must be in [0, 1), got {self.muon_momentum}")
        if not isinstance(self.muon_ns_steps, int) or not 1 <= self.muon_ns_steps < 100:
            raise ConfigError("muon_ns_steps", f"must be an integer in [1, 99], got "
                                               f"{self.muon_ns_steps!r}")
        choose("muon_ns_dtype", self.muon_ns_dtype, NS_DTYPES)
        if self.muon_weight_decay is not None and self.muon_weight_decay < 0:
            raise ConfigError("muon_weight_decay", f"must be >= 0, got {self.muon_weight_decay}")

    @property
    def torch_dtype(self) -> torch.dtype:
        """``dtype`` as a :class:`torch.dtype`."""
        return TORCH_DTYPES[self.dtype]


SETTING_NAMES = tuple(f.name for f in fields(TrainSettings))


def settings_from(config: Any, cls: type[TrainSettings] = TrainSettings,
                  **overrides: Any) -> TrainSettings:
    """``cls`` built from every field ``config`` shares with it, then ``overrides``.

    Lets a flat experiment config (``lr``, ``steps``, ``batch_size``, ...) compose the engine
    settings without repeating them; fields the config lacks keep their defaults.
    """
    names = {f.name for f in fields(cls)}
    values = {n: getattr(config, n) for n in names if hasattr(config, n)}
    values.update(overrides)
    return cls(**values)
