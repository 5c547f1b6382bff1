"""The inputs of the drift experiment's real-data conditions, and the knobs of its ablation.

"Bug or Feature²" App. D.2 trains its MLP on CIFAR-10 (3,072 inputs, normalised per channel
as App. D.1 states, 10 classes, 50,000 images); the CPU runs scikit-learn's digits (64 inputs,
one mean and standard deviation over all pixels, 10 classes, 1,438 training images). Every
difference between the two is a config field here, so one sweep changes one of them:

* ``real_centring``: ``global`` (as loaded: one statistic over all pixels, per channel for
  CIFAR-10), ``per-feature`` (every input standardised over the training set: no input
  carries a mean), ``none`` (raw pixels in [0, 1], every input's mean positive);
* ``real_input_dim`` with ``real_lift``: ``upsample`` draws the digits at ``3 x s x s``
  pixels (bilinear, three equal channels: 3,072 is CIFAR-10's 3 x 32 x 32), ``project``
  multiplies the flattened inputs by a fixed Gaussian matrix (scaled by ``1/sqrt(d)``, drawn
  from seed 0) to that dimension;
* ``real_classes``: only the images of the first ``k`` classes (train and test).

All three are ours (the ablation's settings); the defaults leave the data as loaded.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from actlab.errors import ConfigError

if TYPE_CHECKING:
    from actlab.experiments.drift import DriftConfig

CENTRINGS = ("global", "per-feature", "none")
LIFTS = ("upsample", "project")
PROJECTION_SEED = 0  # one projection for every seed: the data stay fixed across runs


def upsample_side(in_dim: int) -> int:
    """The side ``s`` with ``3 * s * s == in_dim`` (at least the digits' 8); ``ConfigError``
    if there is none."""
    side = math.isqrt(in_dim // 3)
    if in_dim % 3 or 3 * side * side != in_dim or side < 8:
        raise ConfigError("real_input_dim", f"upsample needs 3 x s x s inputs with s >= 8 "
                                            f"(3072 = 3 x 32 x 32), got {in_dim}")
    return side


def check_real_data(config: DriftConfig) -> None:
    """Refuse a lift that the data cannot take before any unit starts."""
    if config.real_input_dim and config.real_lift == "upsample":
        if config.cifar_dir:
            raise ConfigError("real_lift", "upsample draws the digits larger; CIFAR-10 keeps "
                                           "its 3,072 inputs (use real_lift=project)")
        upsample_side(config.real_input_dim)


def load_real(config: DriftConfig) -> tuple[Tensor, Tensor, Tensor, Tensor, int, int]:
    """``x, y, x_eval, y_eval, in_dim, num_classes`` of the real-data conditions, flattened
    and changed as the config's ``real_*`` fields say (module docstring)."""
    raw = config.real_centring == "none"
    if config.cifar_dir:
        from actlab.data.cifar import CIFAR10_MEAN, CIFAR10_STD, load_cifar10

        data = load_cifar10(config.cifar_dir, limit_train=config.cifar_limit or None)
        images, images_eval = data.x_train, data.x_test
        if raw:  # undo App. D.1's per-channel normalisation: pixels back in [0, 1]
            mean = torch.tensor(CIFAR10_MEAN, dtype=images.dtype).view(1, 3, 1, 1)
            std = torch.tensor(CIFAR10_STD, dtype=images.dtype).view(1, 3, 1, 1)
            images, images_eval = images * std + mean, images_eval * std + mean
    else:
        from actlab.data.digits import load_digits

        side = (upsample_side(config.real_input_dim)
                if config.real_input_dim and config.real_lift == "upsample" else 8)
        data = load_digits(image_size=side, channels=3 if side != 8 else 1, standardize=not raw)
        images, images_eval = data.x_train, data.x_test
    x, y = images.flatten(1), data.y_train
    x_eval, y_eval = images_eval.flatten(1), data.y_test
    classes = data.num_classes
    if config.real_classes:
        if config.real_classes > classes:
            raise ConfigError("real_classes", f"the data have {classes} classes, asked for "
                                              f"{config.real_classes}")
        keep, keep_eval = y < config.real_classes, y_eval < config.real_classes
        x, y, x_eval, y_eval = x[keep], y[keep], x_eval[keep_eval], y_eval[keep_eval]
        classes = config.real_classes
    if config.real_centring == "per-feature":
        mean, std = x.mean(0), x.std(0)
        std = torch.where(std > 0, std, torch.ones_like(std))  # a constant pixel becomes 0
        x, x_eval = (x - mean) / std, (x_eval - mean) / std
    if config.real_input_dim and config.real_lift == "project" \
            and config.real_input_dim != x.shape[1]:
        gen = torch.Generator().manual_seed(PROJECTION_SEED)
        matrix = torch.randn(x.shape[1], config.real_input_dim, generator=gen,
                             dtype=x.dtype) / math.sqrt(x.shape[1])
        x, x_eval = x @ matrix, x_eval @ matrix
    return x, y, x_eval, y_eval, int(x.shape[1]), classes


def describe_setting(config: DriftConfig) -> dict[str, object]:
    """The real-data conditions' setting as ``summary.json`` records it (every ablation field)."""
    if config.epochs:
        length = (f"{config.epochs:g} epochs of {config.real_epoch_size} examples"
                  if config.real_epoch_size else f"{config.epochs:g} epochs")
    else:
        length = f"{config.steps} steps"
    return {"data": "cifar-10" if config.cifar_dir else "digits",
            "hidden": config.real_hidden or config.hidden, "depth": config.depth,
            "optimizer": f"{config.digits_optimizer} lr={config.digits_lr:g}",
            "weight_decay": config.digits_weight_decay, "training": length,
            "batch_size": config.batch_size, "centring": config.real_centring,
            "input_dim": config.real_input_dim or "native",
            "lift": config.real_lift if config.real_input_dim else "none",
            "classes": config.real_classes or "all", "input_noise": config.real_noise}
