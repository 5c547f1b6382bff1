"""The image classifier recipe: train a CPU-scale classifier with Adam, then measure test
accuracy and its activations (the digits/CIFAR experiments of "Bug or Feature²").

A config using the recipe has the fields of :class:`ImageTrainingConfig` (``steps``,
``batch_size``, ``lr``, ``vit_lr``, ``cifar_dir``, ``cifar_limit``) and calls
:func:`check_cifar_dir` in its ``check()``. A unit then reads::

    from actlab.nn.classifiers import build_classifier
    from actlab.recipes.image_classifier import (adam_settings, fit_and_measure,
                                                 load_config_data, record_diverged)

    data = load_config_data(config)         # digits, or CIFAR-10 when cifar_dir is set
    model = build_classifier("mlp", data, "relu", seed=seed)
    out = fit_and_measure(model, data, adam_settings(config, "mlp"), seed=seed)
    if out.status != "ok":                  # a non-finite loss stopped training
        record_diverged(result, out.status, run, seed, out.steps)
    else:
        result.add(run, seed, out.steps, "", "sparsity", out.sparsity)

:func:`activation_statistics` measures any model alone: per activation site
(:func:`actlab.surgery.find_activations`) the share of negative inputs (``preact_neg_frac``)
and of outputs with ``|a| < 1e-7`` (``sparsity``, "Bug or Feature²" App. D.1), pooled over
all inputs, in eval mode, plus their mean over the sites.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import torch
from torch import Tensor, nn

from actlab.data.images import load_image_data
from actlab.device import to_model_device
from actlab.errors import ConfigError
from actlab.train.loop import STATUS_OK
from actlab.train.settings import TrainSettings
from actlab.train.supervised import evaluate, train

if TYPE_CHECKING:
    from actlab.recipes.unit import UnitResult

__all__ = ["FitOutcome", "ImageTrainingConfig", "activation_statistics", "adam_settings",
           "check_cifar_dir", "data_label", "fit_and_measure", "load_config_data",
           "record_diverged"]


class ImageTrainingConfig(Protocol):
    """The config fields the recipe reads."""

    steps: int
    batch_size: int
    lr: float
    vit_lr: float
    cifar_dir: str
    cifar_limit: int


def check_cifar_dir(cifar_dir: str) -> None:
    """``ConfigError`` on ``cifar_dir`` unless it is empty or holds the CIFAR-10 python files."""
    if cifar_dir:
        from actlab.data.cifar import find_cifar10

        try:
            find_cifar10(cifar_dir)
        except (FileNotFoundError, ValueError) as exc:
            raise ConfigError("cifar_dir", str(exc)) from None


def load_config_data(config: ImageTrainingConfig) -> Any:
    """Digits, or the first ``cifar_limit`` CIFAR-10 images of ``cifar_dir`` when it is set."""
    return load_image_data(config.cifar_dir, config.cifar_limit or None)


def data_label(config: ImageTrainingConfig, digits: str = "digits") -> str:
    """``cifar10`` when the config points at CIFAR-10, else ``digits`` (the summary's label)."""
    return "cifar10" if config.cifar_dir else digits


def adam_settings(config: ImageTrainingConfig, model_kind: str) -> TrainSettings:
    """Adam for ``config.steps`` steps at ``vit_lr`` for the ViT and MaxViT, ``lr`` for the
    other models."""
    from actlab.nn.classifiers import TRANSFORMER_KINDS

    transformer = model_kind in TRANSFORMER_KINDS
    return TrainSettings(optimizer="adam", lr=config.vit_lr if transformer else config.lr,
                         steps=config.steps, batch_size=config.batch_size)


def record_diverged(result: UnitResult, status: str, run: str, seed: int, step: int,
                    layer: str = "") -> None:
    """Mark the unit with a failed training ``status`` and record its loss as ``nan``."""
    result.status = status
    result.add(run, seed, step, layer, "train_loss", math.nan)


@torch.no_grad()
def activation_statistics(model: nn.Module, x: Tensor, *, batch_size: int = 512,
                          metrics: tuple[str, ...] = ("preact_neg_frac", "sparsity"),
                          eval_mode: bool = True) -> dict[str, dict[str, float]]:
    """Per activation site, the probe's ``metrics`` pooled over all of ``x``, plus ``"mean"``.

    ``preact_neg_frac`` is the share of negative activation inputs, ``sparsity`` the share of
    outputs with ``|a| < 1e-7`` ("Bug or Feature²" App. D.1). ``"mean"`` averages the sites.
    Runs in eval mode unless ``eval_mode=False``; the model's mode is restored.
    """
    from actlab.probe.measure import measure_once

    was_training = model.training
    model.train(not eval_mode)
    try:
        batches = (to_model_device(model, x[start:start + batch_size])
                   for start in range(0, len(x), batch_size))
        table = measure_once(model, batches, metrics=metrics)
    finally:
        model.train(was_training)
    stats: dict[str, dict[str, float]] = {}
    for row in table.itertuples():
        stats.setdefault(row.layer, {})[row.metric] = float(row.value)
    if stats:
        stats["mean"] = {m: float(sum(s[m] for s in stats.values() if m in s) /
                                  max(1, sum(m in s for s in stats.values()))) for m in metrics}
    return stats


@dataclass
class FitOutcome:
    """What :func:`fit_and_measure` found: accuracy and activation statistics on the test set."""

    status: str
    accuracy: float
    neg_frac: float
    sparsity: float
    steps: int
    seconds: float
    final_loss: float


def fit_and_measure(model: nn.Module, data: Any, settings: TrainSettings, *, seed: int,
                    progress: Callable[..., Iterable] | None = None) -> FitOutcome:
    """Train ``model`` on ``data``'s training split, then measure test accuracy and the mean
    over activation sites of the negative-input share and the sparsity (eval mode).

    ``seed`` seeds the batch order and torch's global generator (noise inside activations
    such as ``noisy_relu``). A diverged run returns ``status="diverged"`` with ``nan``
    measurements.
    """
    torch.manual_seed(seed)
    result = train(model, data.x_train, data.y_train, settings,
                   generator=torch.Generator().manual_seed(seed), progress=progress)
    if result.status != STATUS_OK:
        return FitOutcome(result.status, math.nan, math.nan, math.nan, result.steps,
                          result.seconds, math.nan)
    accuracy = evaluate(model, data.x_test, data.y_test)["accuracy"]
    stats = activation_statistics(model, data.x_test).get("mean", {})
    return FitOutcome(STATUS_OK, accuracy, stats.get("preact_neg_frac", math.nan),
                      stats.get("sparsity", math.nan), result.steps, result.seconds,
                      result.final_loss)
