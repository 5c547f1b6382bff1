"""Shared plumbing of the digits/CIFAR classification experiments (seed 003).

``sparsity``, ``sparse-activations``, ``relufication`` and ``accumulation-stop`` share the
same config fields (``models``, ``batch_size``, ``lr``, ``vit_lr``, ``cifar_dir``,
``cifar_limit``), load their data and build their Adam settings the same way, record a
diverged run the same way and summarize seeds by mean and sd. Those pieces live here; the
config classes declare their fields themselves, so each keeps its field order (and thus its
``config.json``).
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import numpy as np

from actlab.errors import ConfigError
from actlab.runner.experiment import STATUS_OK, UnitResult
from actlab.train.classify import MODEL_KINDS, TrainSettings, load_image_data


class ImageTrainingConfig(Protocol):
    """The config fields the helpers below read."""

    steps: int
    batch_size: int
    lr: float
    vit_lr: float
    cifar_dir: str
    cifar_limit: int


def check_models(models: list[str]) -> None:
    """``ConfigError`` on the ``models`` field unless it is a non-empty list of model kinds."""
    bad = [m for m in models if m not in MODEL_KINDS]
    if bad or not models:
        raise ConfigError("models", f"choose from {', '.join(MODEL_KINDS)}, got {bad or 'none'}")


def load_config_data(config: ImageTrainingConfig) -> Any:
    """Digits, or the first ``cifar_limit`` CIFAR-10 images of ``cifar_dir`` when it is set."""
    return load_image_data(config.cifar_dir, config.cifar_limit or None)


def adam_settings(config: ImageTrainingConfig, model_kind: str) -> TrainSettings:
    """Adam for ``config.steps`` steps at ``vit_lr`` for the ViT, ``lr`` for the other models."""
    return TrainSettings(optimizer="adam", lr=config.vit_lr if model_kind == "vit" else config.lr,
                         steps=config.steps, batch_size=config.batch_size)


def record_diverged(result: UnitResult, status: str, run: str, seed: int, step: int,
                    layer: str = "") -> None:
    """Mark the unit with a failed training ``status`` and record its loss as ``nan``."""
    result.status = status
    result.add(run, seed, step, layer, "train_loss", math.nan)


def mean_and_sd(values: Any) -> tuple[float | None, float | None]:
    """Mean and sample sd (ddof 1) of the finite ``values``; ``None`` where too few for either."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    return (float(v.mean()) if len(v) else None, float(v.std(ddof=1)) if len(v) > 1 else None)


def data_label(config: ImageTrainingConfig, digits: str = "digits") -> str:
    """``cifar10`` when the config points at CIFAR-10, else ``digits`` (the summary's label)."""
    return "cifar10" if config.cifar_dir else digits


def seeds_in(table: Any) -> list[int]:
    """The sorted seeds that have rows in the tidy ``table``."""
    return sorted({int(s) for s in table["seed"]})


def failed_units(results: list[dict[str, Any]]) -> list[Any]:
    """The units of the runner's ``results`` whose status is not ``ok``."""
    return [r["unit"] for r in results if r["status"] != STATUS_OK]
