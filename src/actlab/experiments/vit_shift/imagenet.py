"""``vit-shift`` on an image folder (ImageNet at the paper's scale, ``data=folder:DIR``): the
ViT trains on the streamed, augmented training split (:mod:`actlab.recipes.stream_classifier`)
and every checkpoint records what the digits run records, measured on parts of the folder:
the training loss and accuracy on ``train_eval_images`` training images spread over the
classes (evaluation transform, no mixing), test loss and accuracy on the validation split
(``eval_images`` of it, 0: all), and the hidden-state and activation means on
``probe_images`` validation images spread over the classes.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from actlab import analysis
from actlab.device import place
from actlab.runner.experiment import STATUS_DIVERGED, UnitResult
from actlab.train.distributed import DistInfo

FOLDER_PREFIX = "folder:"


def folder_root(config: Any) -> str:
    """The folder of ``data=folder:DIR``."""
    return config.data[len(FOLDER_PREFIX):]


def folder_streams(config: Any, seed: int) -> Any:
    """The training and validation streams of the config's folder, with its augmentation."""
    from actlab.data.augment import ImageTransform
    from actlab.data.mixing import Mixing
    from actlab.recipes.stream_classifier import image_streams

    transform = ImageTransform(config.image_size, config.crop, 0.5, config.randaugment,
                               config.erase)
    mixing = None
    if config.mixup or config.cutmix:
        def mixing(classes: int) -> Mixing:
            return Mixing(classes, config.mixup, config.cutmix, smoothing=config.smoothing)
    return image_streams(folder_root(config), transform, batch_size=config.batch_size,
                         seed=seed, mixing=mixing, workers=config.workers)


def build_vit(config: Any, activation: str, in_channels: int, classes: int) -> Any:
    """The experiment's ViT at the config's shape for ``classes`` classes."""
    from actlab.nn.vit import ViT

    size = config.image_size if config.data != "digits" else 8
    return ViT(image_size=size, patch_size=config.patch_size, in_channels=in_channels,
               num_classes=classes, dim=config.dim, depth=config.depth, heads=config.heads,
               mlp_ratio=config.mlp_ratio, activation=activation, bias=config.bias,
               drop_path=config.drop_path)


def train_vit_folder(config: Any, activation: str, seed: int, result: UnitResult, run: str,
                     progress: Any = None, dist: DistInfo | None = None) -> str:
    """Train one ViT with ``activation`` on the folder; add its checkpoint rows to
    ``result``; the status."""
    from actlab.experiments.vit_shift.statistics import step_logger, stream_statistics
    from actlab.recipes.stream_classifier import evaluate_stream, train_on_stream

    streams = folder_streams(config, seed)
    try:
        torch.manual_seed(seed)  # same seed, same initial weights for both activations
        model = place(build_vit(config, activation, 3, streams.num_classes))
        if config.dtype == "float64":
            model = model.double()
        steps = config.total_steps(len(streams.train))
        checkpoints = set(analysis.log_steps(steps, config.log_points))
        dtype = torch.float64 if config.dtype == "float64" else None
        probe_x = next(iter(streams.val.eval_batches(config.probe_images,
                                                     limit=config.probe_images)))[0]
        probe_x = probe_x.to(dtype or probe_x.dtype)

        def checkpoint(updates: int) -> None:
            for split, stream, limit in (("train", streams.train, config.train_eval_images),
                                         ("test", streams.val, config.eval_images or None)):
                metrics = evaluate_stream(model, stream, batch_size=config.eval_batch,
                                          limit=limit, dist=dist)
                result.add(run, seed, updates, "", f"{split}_loss", metrics["loss"])
                result.add(run, seed, updates, "", f"{split}_accuracy", metrics["accuracy"])
            for (layer, metric), value in stream_statistics(model, probe_x, dist).items():
                result.add(run, seed, updates, layer, metric, value)

        on_step = step_logger(result, run, seed, steps, config.loss_every, checkpoints, checkpoint)

        checkpoint(0)
        outcome = train_on_stream(model, streams.train, config.settings(steps, len(streams.train)),
                                  dist=dist, on_step=on_step, progress=progress, dtype=dtype)
    finally:
        streams.close()
    if outcome.status == STATUS_DIVERGED:
        result.add(run, seed, outcome.steps + 1, "", "test_loss", math.nan)
    return outcome.status
