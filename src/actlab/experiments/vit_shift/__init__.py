"""``vit-shift``: a small ViT on digits with ``gelu`` vs ``gelu:adaptive`` ("Rethinking
Activation Functions" §4.1, App. E).

The adaptive shift (eq. 9) subtracts, in every MLP, the current mean over the hidden neurons
from each neuron's GELU output. Both models of a seed share initial weights and batch
order. At log- and linearly-spaced checkpoints we evaluate the training loss (whole training
set, eval mode), test loss and test accuracy, and, on the test images, the mean of the
residual stream after every block (``hidden_mean``, the statistic of §2.2) and the mean
post-activation output of every MLP (``act_mean``).

Residuals are paired per seed, ``shifted - unshifted`` (Fig. 6). The overshoot of a hidden
state is how far its trajectory goes past its final value, on the far side from its start
(``max(0, max_t s (h_t - h_T))``, ``s = sign(h_T - h_0)``, :func:`actlab.analysis.overshoot`,
as in teacher-student; 0 for a monotone approach), after the last block;
``overshoot_per_block`` lists every block, ``overshoot_step_per_block`` the step of the peak.

``summary.json``: ``test_acc_unshifted``, ``test_acc_shifted``, ``test_loss_residual_final``,
``train_loss_residual_final``, ``acc_residual_final``, ``overshoot_unshifted``,
``overshoot_shifted`` and their peak steps ``overshoot_step_unshifted``,
``overshoot_step_shifted`` (seed means), plus early residuals, per-condition details and the
scale.

``--nproc N`` trains each unit's ViT data-parallel under torchrun (every rank draws the
global batch and keeps its rows; the probe merges the ranks' parts of the test images), with
the rows of one process on the global batch; ``dtype="float64"`` trains in double precision.

``data=folder:DIR`` trains on an image folder with ``train/`` and ``val/`` class folders
instead of the digits, streamed and augmented (:mod:`actlab.experiments.vit_shift.imagenet`;
``image_size``, ``crop``, ``randaugment``, ``erase``, ``mixup``, ``cutmix``, ``smoothing``,
``workers`` and the ``*_images`` fields apply to it alone). ``epochs`` > 0 trains for that many
passes over the training images instead of ``steps`` updates; ``schedule``,
``warmup_epochs``, ``min_lr_ratio``, ``decay_vectors``, ``bias`` and ``drop_path`` default to
the digits run's constant-rate AdamW ViT. ``--paper`` is ViT-Base on ImageNet-1K as §4.1
trains it (:data:`~actlab.experiments.imagenet_paper.VIT_SHIFT`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd
import torch

from actlab import analysis
from actlab.device import place
from actlab.errors import ConfigError
from actlab.experiments.classifier_paper import epoch_steps
from actlab.experiments.imagenet_paper import VIT_SHIFT, folder_shape, image_workload
from actlab.experiments.vit_shift.claims import claims as summary_claims
from actlab.experiments.vit_shift.figures import draw_figures
from actlab.experiments.vit_shift.statistics import step_logger, stream_statistics
from actlab.experiments.vit_shift.summary import CONDITIONS, PREFIX, build_summary
from actlab.runner.experiment import (
    STATUS_DIVERGED,
    Claim,
    Experiment,
    RunContext,
    UnitContext,
    UnitResult,
    register,
)
from actlab.runner.fields import CheckedConfig, checked
from actlab.train.distributed import DistInfo
from actlab.train.optim import OPTIMIZERS
from actlab.train.settings import SCHEDULES, TrainSettings
from actlab.train.supervised import torch_threads


@dataclass
class ViTShiftConfig(CheckedConfig):
    """Scale and settings of the ViT study (see the module docstring)."""

    unshifted: str = checked("gelu", spec="activation")
    shifted: str = checked("gelu:adaptive", spec="activation")
    dim: int = checked(64, ge=1)
    depth: int = checked(4, ge=1)
    heads: int = checked(4, ge=1)
    patch_size: int = checked(2, ge=1)
    mlp_ratio: float = checked(2.0, gt=0)
    steps: int = checked(3000, ge=1)
    batch_size: int = checked(128, ge=1)
    optimizer: str = checked("adamw", choices=OPTIMIZERS)
    lr: float = checked(1e-3, gt=0)
    weight_decay: float = checked(0.05, ge=0)
    log_points: int = checked(40, ge=1)
    loss_every: int = checked(10, ge=1)
    threads: int = checked(1, ge=1)
    dtype: str = checked("float32", choices=("float32", "float64"))
    # the model and schedule beyond the digits run's (module docstring)
    bias: bool = False
    drop_path: float = checked(0.0, ge=0, lt=1)
    epochs: float = checked(0.0, ge=0)
    schedule: str = checked("constant", choices=SCHEDULES)
    warmup_epochs: float = checked(0.0, ge=0)
    min_lr_ratio: float = checked(0.1, ge=0, le=1)
    decay_vectors: bool = True
    # an image folder instead of the digits, and its augmentation and measurements
    data: str = "digits"
    image_size: int = checked(224, ge=1)
    crop: str = checked("random-resized", choices=("random-resized", "center"))
    randaugment: str = "rand-m9-mstd0.5-inc1"
    erase: float = checked(0.25, ge=0, le=1)
    mixup: float = checked(0.8, ge=0)
    cutmix: float = checked(1.0, ge=0)
    smoothing: float = checked(0.1, ge=0, lt=1)
    workers: int = checked(8, ge=1)
    eval_images: int = checked(0, ge=0)
    train_eval_images: int = checked(10_000, ge=1)
    probe_images: int = checked(256, ge=1)
    eval_batch: int = checked(256, ge=1)

    def check(self) -> None:
        """Heads divide the width; patches tile the images (the 8x8 digits, or
        ``image_size``); a folder given as ``folder:DIR`` with its two splits."""
        if self.dim % self.heads:
            raise ConfigError("heads", f"dim {self.dim} is not divisible by heads {self.heads}")
        if self.data == "digits":
            if 8 % self.patch_size:
                raise ConfigError("patch_size", f"must divide the 8x8 digits, got "
                                                f"{self.patch_size}")
            return
        if not self.data.startswith("folder:"):
            raise ConfigError("data", f"digits or folder:DIR (an image folder with train/ and "
                                      f"val/), got {self.data!r}")
        from actlab.data.image_stream import split_folders

        try:
            split_folders(self.data[len("folder:"):])
        except FileNotFoundError as exc:
            raise ConfigError("data", str(exc)) from None
        if self.image_size % self.patch_size:
            raise ConfigError("patch_size", f"must divide image_size {self.image_size}, got "
                                            f"{self.patch_size}")
        if self.randaugment:
            from actlab.data.augment import rand_augment

            try:
                rand_augment(self.randaugment)
            except ValueError as exc:
                raise ConfigError("randaugment", str(exc)) from None

    def total_steps(self, n_train: int) -> int:
        """Updates of a run on ``n_train`` images: ``epochs`` passes, or ``steps``."""
        if not self.epochs:
            return self.steps
        return max(1, round(self.epochs * epoch_steps(n_train, self.batch_size)))

    def settings(self, steps: int, n_train: int) -> TrainSettings:
        """The engine's settings for ``steps`` updates on ``n_train`` images."""
        warmup = round(self.warmup_epochs * epoch_steps(n_train, self.batch_size))
        return TrainSettings(optimizer=self.optimizer, lr=self.lr, steps=steps,
                             batch_size=self.batch_size, weight_decay=self.weight_decay,
                             schedule=self.schedule, warmup=min(warmup, steps),
                             min_lr_ratio=self.min_lr_ratio, decay_vectors=self.decay_vectors)


def train_vit(config: ViTShiftConfig, activation: str, seed: int, data: Any,
              result: UnitResult, run: str, progress: Any = None,
              dist: DistInfo | None = None) -> str:
    """Train one ViT with ``activation``; add its checkpoint rows to ``result``; the status.
    ``dist``: this process's place in a data-parallel unit (one process by default)."""
    from actlab.experiments.vit_shift.imagenet import build_vit
    from actlab.train.supervised import evaluate, train

    torch.manual_seed(seed)  # same seed, same initial weights for both activations
    model = place(build_vit(config, activation, 1, data.num_classes))
    if config.dtype == "float64":  # the model and the images, before DDP wraps the model
        model = model.double()
        data = replace(data, x_train=data.x_train.double(), x_test=data.x_test.double())
    steps = config.total_steps(len(data.x_train))
    checkpoints = set(analysis.log_steps(steps, config.log_points))

    def checkpoint(updates: int) -> None:
        train_metrics = evaluate(model, data.x_train, data.y_train)
        test_metrics = evaluate(model, data.x_test, data.y_test)
        result.add(run, seed, updates, "", "train_loss", train_metrics["loss"])
        result.add(run, seed, updates, "", "train_accuracy", train_metrics["accuracy"])
        result.add(run, seed, updates, "", "test_loss", test_metrics["loss"])
        result.add(run, seed, updates, "", "test_accuracy", test_metrics["accuracy"])
        for (layer, metric), value in stream_statistics(model, data.x_test, dist).items():
            result.add(run, seed, updates, layer, metric, value)

    on_step = step_logger(result, run, seed, steps, config.loss_every, checkpoints, checkpoint)

    checkpoint(0)
    settings = config.settings(steps, len(data.x_train))
    outcome = train(model, data.x_train, data.y_train, settings,
                    generator=torch.Generator().manual_seed(seed), on_step=on_step,
                    progress=progress, dist=dist)
    if outcome.status == STATUS_DIVERGED:
        result.add(run, seed, outcome.steps + 1, "", "test_loss", math.nan)
    return outcome.status


@register
class ViTShift(Experiment):
    """Small ViT on digits: unshifted vs adaptively shifted GELU (loss residuals, overshoot)."""

    name = "vit-shift"
    headline_figure = "fig6_residuals"
    description = ("Small ViT on digits, gelu vs gelu:adaptive: train/test loss and accuracy "
                   "residuals, hidden-state overshoot (\"Rethinking Activation Functions\" "
                   "§4.1, App. E)")
    Config = ViTShiftConfig
    quick = {"steps": 240, "log_points": 20, "dim": 48, "depth": 3}
    full = {"steps": 6000, "log_points": 50}
    paper = VIT_SHIFT
    default_seeds = 3
    seeds_per_unit = 1
    distributed = True  # --nproc N: each unit's ViT trains under DDP (train_vit)

    def units(self, config: ViTShiftConfig) -> list[dict[str, Any]]:
        """One unit per condition."""
        return [{"condition": c, "activation": getattr(config, c)} for c in CONDITIONS]

    def run_unit(self, config: ViTShiftConfig, unit: dict[str, Any], seeds: list[int],
                 ctx: UnitContext) -> UnitResult:
        """Train the condition's ViT for each seed (on the digits or the image folder)."""
        from actlab.data.digits import load_digits
        from actlab.experiments.vit_shift.imagenet import train_vit_folder

        result = UnitResult()
        data = load_digits() if config.data == "digits" else None
        run = f"{PREFIX}/{unit['condition']}"
        with torch_threads(config.threads):
            for seed in seeds:
                if data is None:
                    status = train_vit_folder(config, unit["activation"], seed, result, run,
                                              ctx.progress, ctx.dist)
                else:
                    status = train_vit(config, unit["activation"], seed, data, result, run,
                                       ctx.progress, ctx.dist)
                if status == STATUS_DIVERGED:
                    result.status = STATUS_DIVERGED
        return result

    def workloads(self, config: ViTShiftConfig, unit: dict[str, Any]) -> list:
        """What one seed of a condition trains (``actlab plan``): the ViT, with every
        checkpoint's evaluation passes (training and test sets, the probe's images)."""
        from actlab.experiments.vit_shift.imagenet import build_vit, folder_root

        if config.data == "digits":
            from actlab.data.digits import load_digits

            digits = load_digits()
            shape, classes = (1, 8, 8), digits.num_classes
            n_train = len(digits.x_train)
            per_checkpoint = n_train + 2 * len(digits.x_test)
        else:
            folder = folder_shape(folder_root(config), config.image_size)
            shape, classes, n_train = folder.image_shape, folder.num_classes, folder.n_train
            per_checkpoint = (min(config.train_eval_images, n_train) + config.probe_images
                              + min(config.eval_images or folder.n_val, folder.n_val))
        steps = config.total_steps(n_train)
        checkpoints = len(analysis.log_steps(steps, config.log_points))
        return [image_workload(f"vit {config.depth}x{config.dim}",
                               lambda: build_vit(config, unit["activation"], shape[0], classes),
                               shape, steps, config.batch_size, config.optimizer,
                               checkpoints * per_checkpoint)]

    def summarize(self, config: ViTShiftConfig, table: pd.DataFrame,
                  results: list[dict[str, Any]], ctx: RunContext) -> dict:
        """Final accuracies, paired residuals, overshoot; Fig. 6 and Fig. 7(a) figures."""
        summary = build_summary(config, table, results)
        if ctx.draw:  # the run's figures; not redrawn for each seed alone
            draw_figures(table, config.depth, ctx)
        return summary

    def claims(self, summary: dict) -> list[Claim]:
        """Fig. 6 (early deficit, final test loss/accuracy, higher train loss) and Fig. 7(a)."""
        return summary_claims(summary)
