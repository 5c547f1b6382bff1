"""``vit-shift``: a small ViT on digits with ``gelu`` vs ``gelu:adaptive`` (seed 000 §4.1, App. E).

The adaptive shift (eq. 9) subtracts, in every MLP, the current mean over the hidden neurons
from each neuron's GELU output. Both models of a seed share initial weights and batch
order. At log- and linearly-spaced checkpoints we evaluate the training loss (whole training
set, eval mode), test loss and test accuracy, and, on the test images, the mean of the
residual stream after every block (``hidden_mean``, the statistic of §2.2) and the mean
post-activation output of every MLP (``act_mean``).

Residuals are paired per seed, ``shifted - unshifted`` (Fig. 6). The overshoot of a hidden
state is its largest deviation from its final value (as in teacher-student), after the last
block; ``overshoot_per_block`` lists every block.

``summary.json``: ``test_acc_unshifted``, ``test_acc_shifted``, ``test_loss_residual_final``,
``train_loss_residual_final``, ``acc_residual_final``, ``overshoot_unshifted``,
``overshoot_shifted`` (seed means), plus early residuals, per-condition details and the scale.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch

from actlab import analysis
from actlab.errors import ConfigError
from actlab.experiments._common import check_activation_specs
from actlab.experiments._vit_shift_report import PREFIX, vit_shift_claims, vit_shift_figures
from actlab.runner.experiment import (
    STATUS_DIVERGED,
    Claim,
    Experiment,
    RunContext,
    UnitContext,
    UnitResult,
    register,
)
from actlab.train.classify import OPTIMIZERS, TrainSettings, torch_threads
from actlab.train.placement import place, to_model_device

CONDITIONS = ("unshifted", "shifted")
EARLY_FRACTION = 0.05  # "early" comparison point: the checkpoint nearest 5% of training


@dataclass
class ViTShiftConfig:
    """Scale and settings of the ViT study (see the module docstring)."""

    unshifted: str = "gelu"
    shifted: str = "gelu:adaptive"
    dim: int = 64
    depth: int = 4
    heads: int = 4
    patch_size: int = 2
    mlp_ratio: float = 2.0
    steps: int = 3000
    batch_size: int = 128
    optimizer: str = "adamw"
    lr: float = 1e-3
    weight_decay: float = 0.05
    log_points: int = 40
    loss_every: int = 10
    threads: int = 1

    def __post_init__(self) -> None:
        for name in ("dim", "depth", "heads", "patch_size", "steps", "batch_size", "log_points",
                     "loss_every", "threads"):
            if getattr(self, name) < 1:
                raise ConfigError(name, f"must be >= 1, got {getattr(self, name)}")
        if self.dim % self.heads:
            raise ConfigError("heads", f"dim {self.dim} is not divisible by heads {self.heads}")
        if 8 % self.patch_size:
            raise ConfigError("patch_size", f"must divide the 8x8 digits, got {self.patch_size}")
        if not self.mlp_ratio > 0:
            raise ConfigError("mlp_ratio", f"must be > 0, got {self.mlp_ratio}")
        if not self.lr > 0 or self.weight_decay < 0:
            raise ConfigError("lr", f"need lr > 0 and weight_decay >= 0, got {self.lr}, "
                              f"{self.weight_decay}")
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError("optimizer", f"must be one of {', '.join(OPTIMIZERS)}, "
                              f"got {self.optimizer!r}")
        for name in ("unshifted", "shifted"):
            check_activation_specs([getattr(self, name)], field=name)


@torch.no_grad()
def stream_statistics(model: Any, x: torch.Tensor) -> dict[tuple[str, str], float]:
    """``{(layer, metric): value}``: each block's ``hidden_mean`` and each activation's
    ``act_mean`` over the images ``x``, measured by :class:`actlab.Probe` in eval mode."""
    from actlab.probe.probe import Probe

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
              result: UnitResult, run: str, progress: Any = None) -> str:
    """Train one ViT with ``activation``; add its checkpoint rows to ``result``; the status."""
    from actlab.nn.vit import ViT
    from actlab.train.classify import evaluate, train

    torch.manual_seed(seed)  # same seed, same initial weights for both activations
    model = place(ViT(image_size=8, patch_size=config.patch_size, in_channels=1,
                      num_classes=data.num_classes, dim=config.dim, depth=config.depth,
                      heads=config.heads, mlp_ratio=config.mlp_ratio, activation=activation))
    checkpoints = set(analysis.log_steps(config.steps, config.log_points))

    def checkpoint(updates: int) -> None:
        train_metrics = evaluate(model, data.x_train, data.y_train)
        test_metrics = evaluate(model, data.x_test, data.y_test)
        result.add(run, seed, updates, "", "train_loss", train_metrics["loss"])
        result.add(run, seed, updates, "", "train_accuracy", train_metrics["accuracy"])
        result.add(run, seed, updates, "", "test_loss", test_metrics["loss"])
        result.add(run, seed, updates, "", "test_accuracy", test_metrics["accuracy"])
        for (layer, metric), value in stream_statistics(model, data.x_test).items():
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
                    progress=progress)
    if outcome.status == STATUS_DIVERGED:
        result.add(run, seed, outcome.steps + 1, "", "test_loss", math.nan)
    return outcome.status


@register
class ViTShift(Experiment):
    """Small ViT on digits: unshifted vs adaptively shifted GELU (loss residuals, overshoot)."""

    name = "vit-shift"
    headline_figure = "fig6_residuals"
    description = ("Small ViT on digits, gelu vs gelu:adaptive: train/test loss and accuracy "
                   "residuals, hidden-state overshoot (seed 000 §4.1, App. E)")
    Config = ViTShiftConfig
    quick = {"steps": 300, "log_points": 20, "dim": 48, "depth": 3}
    full = {"steps": 6000, "log_points": 50}
    default_seeds = 3
    seeds_per_unit = 1

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
                             ctx.progress) == STATUS_DIVERGED:
                    result.status = STATUS_DIVERGED
        return result

    def summarize(self, config: ViTShiftConfig, table: pd.DataFrame,
                  results: list[dict[str, Any]], ctx: RunContext) -> dict:
        """Final accuracies, paired residuals, overshoot; Fig. 6 and Fig. 7(a) figures."""
        last_block = f"block{config.depth - 1}"
        summary: dict[str, Any] = {
            "scale": {"steps": config.steps, "batch_size": config.batch_size, "dim": config.dim,
                      "depth": config.depth, "heads": config.heads,
                      "optimizer": f"{config.optimizer} lr={config.lr:g} "
                                   f"wd={config.weight_decay:g}",
                      "seeds": sorted({int(s) for s in table["seed"]}) if len(table) else []},
            "failed_units": [r["unit"] for r in results if r["status"] != "ok"],
        }
        for cond in CONDITIONS:
            run = f"{PREFIX}/{cond}"
            entry: dict[str, Any] = {}
            for metric in ("test_accuracy", "test_loss", "train_loss", "train_accuracy"):
                curve = analysis.curves(table, run, metric)
                if not curve.empty:
                    entry[f"final_{metric}"] = analysis.finite_mean(curve.iloc[-1])
                    entry[f"best_{metric}"] = analysis.finite_mean(
                        curve.max() if "accuracy" in metric else curve.min())
            per_block = {}
            for block in range(config.depth):
                hidden = analysis.curves(table, run, "hidden_mean", f"block{block}")
                if not hidden.empty:
                    per_block[f"block{block}"] = analysis.finite_mean(analysis.overshoot(hidden))
            entry["overshoot_per_block"] = per_block
            entry["overshoot"] = per_block.get(last_block)
            summary[cond] = entry
            summary[f"test_acc_{cond}"] = entry.get("final_test_accuracy")
            summary[f"overshoot_{cond}"] = entry.get("overshoot")
        for metric, key in (("test_loss", "test_loss"), ("train_loss", "train_loss"),
                            ("test_accuracy", "acc")):
            summary[f"{key}_residual_final"] = summary[f"{key}_residual_early"] = None
            residual = analysis.paired_residual(table, metric, PREFIX)
            if residual.empty:
                continue
            step = analysis.early_step(list(residual.index), config.steps, EARLY_FRACTION)
            summary["early_step"] = step
            summary[f"{key}_residual_final"] = analysis.finite_mean(residual.iloc[-1])
            summary[f"{key}_residual_early"] = analysis.finite_mean(residual.loc[step])
            mean = residual.mean(axis=1)
            summary[f"{key}_residual_min"] = float(mean.min())
            summary[f"{key}_residual_max"] = float(mean.max())
        u = analysis.curves(table, f"{PREFIX}/unshifted", "test_loss")
        s = analysis.curves(table, f"{PREFIX}/shifted", "test_loss")
        if not u.empty and not s.empty:
            summary["test_loss_crossover_steps"] = [
                None if math.isnan(v) else v for v in analysis.crossover_steps(u, s)]
        vit_shift_figures(table, config.depth, ctx)
        # Which of the seed's effects this run reproduced, in words (from the claims).
        summary["note"] = [f"{'reproduced' if c.held else 'NOT reproduced'}: {c.claim} "
                           f"({c.measured})" for c in self.claims(summary)]
        return summary

    def claims(self, summary: dict) -> list[Claim]:
        """Fig. 6 (early deficit, final test loss/accuracy, higher train loss) and Fig. 7(a)."""
        return vit_shift_claims(summary)
