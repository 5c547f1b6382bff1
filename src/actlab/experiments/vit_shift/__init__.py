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
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd
import torch

from actlab import analysis
from actlab.device import place, to_model_device
from actlab.errors import ConfigError
from actlab.experiments.vit_shift.claims import claims as summary_claims
from actlab.experiments.vit_shift.figures import draw_figures
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
from actlab.train.distributed import DistInfo, rank_slice
from actlab.train.optim import OPTIMIZERS
from actlab.train.settings import TrainSettings
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

    def check(self) -> None:
        """Heads divide the width; patches tile the 8x8 digits."""
        if self.dim % self.heads:
            raise ConfigError("heads", f"dim {self.dim} is not divisible by heads {self.heads}")
        if 8 % self.patch_size:
            raise ConfigError("patch_size", f"must divide the 8x8 digits, got {self.patch_size}")


@torch.no_grad()
def stream_statistics(model: Any, x: torch.Tensor,
                      dist: DistInfo | None = None) -> dict[tuple[str, str], float]:
    """``{(layer, metric): value}``: each block's ``hidden_mean`` and each activation's
    ``act_mean`` over the images ``x``, measured by :class:`actlab.Probe` in eval mode (a
    data-parallel rank measures its part of ``x``; the probe merges the ranks')."""
    from actlab.probe.probe import Probe

    if dist is not None:
        x = x[rank_slice(len(x), dist)]

    was_training = model.training
    model.eval()
    probe = Probe(model, every=[0], blocks=list(model.blocks), weights=False,
                  metrics=["hidden_mean", "act_mean"])
    try:
        model(to_model_device(model, x))
        probe.step()
        table = probe.table()
    finally:
        probe.close()
        model.train(was_training)
    return {(_short(row.layer), row.metric): float(row.value) for row in table.itertuples()}


def _short(layer: str) -> str:
    """``blocks.3`` -> ``block3``, ``blocks.3.mlp.act`` -> ``act3``."""
    parts = layer.split(".")
    if len(parts) >= 2 and parts[0] == "blocks" and parts[1].isdigit():
        return f"block{parts[1]}" if len(parts) == 2 else f"act{parts[1]}"
    return layer


def train_vit(config: ViTShiftConfig, activation: str, seed: int, data: Any,
              result: UnitResult, run: str, progress: Any = None,
              dist: DistInfo | None = None) -> str:
    """Train one ViT with ``activation``; add its checkpoint rows to ``result``; the status.
    ``dist``: this process's place in a data-parallel unit (one process by default)."""
    from actlab.nn.vit import ViT
    from actlab.train.supervised import evaluate, train

    torch.manual_seed(seed)  # same seed, same initial weights for both activations
    model = place(ViT(image_size=8, patch_size=config.patch_size, in_channels=1,
                      num_classes=data.num_classes, dim=config.dim, depth=config.depth,
                      heads=config.heads, mlp_ratio=config.mlp_ratio, activation=activation))
    if config.dtype == "float64":  # the model and the images, before DDP wraps the model
        model = model.double()
        data = replace(data, x_train=data.x_train.double(), x_test=data.x_test.double())
    checkpoints = set(analysis.log_steps(config.steps, config.log_points))

    def checkpoint(updates: int) -> None:
        train_metrics = evaluate(model, data.x_train, data.y_train)
        test_metrics = evaluate(model, data.x_test, data.y_test)
        result.add(run, seed, updates, "", "train_loss", train_metrics["loss"])
        result.add(run, seed, updates, "", "train_accuracy", train_metrics["accuracy"])
        result.add(run, seed, updates, "", "test_loss", test_metrics["loss"])
        result.add(run, seed, updates, "", "test_accuracy", test_metrics["accuracy"])
        for (layer, metric), value in stream_statistics(model, data.x_test, dist).items():
            result.add(run, seed, updates, layer, metric, value)

    def on_step(step: int, value: float) -> None:
        updates = step + 1
        if step % config.loss_every == 0 or updates == config.steps:
            result.add(run, seed, updates, "", "batch_loss", value)
        if updates in checkpoints:
            checkpoint(updates)

    checkpoint(0)
    settings = TrainSettings(optimizer=config.optimizer, lr=config.lr, steps=config.steps,
                             batch_size=config.batch_size, weight_decay=config.weight_decay)
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
    default_seeds = 3
    seeds_per_unit = 1
    distributed = True  # --nproc N: each unit's ViT trains under DDP (train_vit)

    def units(self, config: ViTShiftConfig) -> list[dict[str, Any]]:
        """One unit per condition."""
        return [{"condition": c, "activation": getattr(config, c)} for c in CONDITIONS]

    def run_unit(self, config: ViTShiftConfig, unit: dict[str, Any], seeds: list[int],
                 ctx: UnitContext) -> UnitResult:
        """Train the condition's ViT for each seed."""
        from actlab.data.digits import load_digits

        result = UnitResult()
        data = load_digits()
        run = f"{PREFIX}/{unit['condition']}"
        with torch_threads(config.threads):
            for seed in seeds:
                if train_vit(config, unit["activation"], seed, data, result, run,
                             ctx.progress, ctx.dist) == STATUS_DIVERGED:
                    result.status = STATUS_DIVERGED
        return result

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
