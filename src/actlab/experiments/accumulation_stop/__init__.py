"""``accumulation-stop``: training speed with LayerNorm, BatchNorm, Percentile Centering, and
Percentile Centering frozen after warm-up ("Bug or Feature²" §7, App. B.4).

Each model trains on digits with each norm; Percentile Centering computes its statistics
every step (``percentile``) or only for ``warmup`` steps, after which Accumulation Stop freezes
them (``percentile-frozen``). Throughput after warm-up is steps per second of this thread's CPU
time (robust to a shared machine), the median over blocks of steps as in
``benchmarks/percentile.py``, reported as a ratio to LayerNorm with its noise (the speed claim is
judged on the 95 % interval of the per-seed ratios), with test accuracy beside it. The paper measured GPU
throughput (DiT-S/2, MaxViT-T): up to 28% slower while computing percentiles, 1.00-1.34x the
baseline once frozen, quality within 2%. ``--set models=maxvit`` trains a small MaxViT
(:mod:`actlab.nn.maxvit`, whose ``maxvit_config("maxvit-t")`` is the paper's MaxViT-T): the
conditions' norms are its transformer pre-norms, its convolutions keep BatchNorm.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch

from actlab.errors import ConfigError
from actlab.experiments.accumulation_stop.claims import claims as summary_claims
from actlab.experiments.accumulation_stop.figures import draw_figures
from actlab.experiments.accumulation_stop.summary import build_summary
from actlab.nn.classifiers import CLASSIFIER_KINDS, TRANSFORMER_KINDS
from actlab.recipes.image_classifier import (
    adam_settings,
    check_cifar_dir,
    load_config_data,
    record_diverged,
)
from actlab.runner.experiment import (
    STATUS_OK,
    Claim,
    Experiment,
    RunContext,
    UnitContext,
    UnitResult,
    register,
)
from actlab.runner.fields import CheckedConfig, checked
from actlab.train.supervised import torch_threads
from actlab.train.timing import StepClock, throughput

NORMS = ("layernorm", "batchnorm", "percentile", "percentile-frozen")


@dataclass
class AccumulationStopConfig(CheckedConfig):
    """Models, norms, percentile, warm-up and training length."""

    models: list[str] = checked(default_factory=lambda: ["mlp", "vit"], choices=CLASSIFIER_KINDS,
                                nonempty=True)
    norms: list[str] = checked(default_factory=lambda: list(NORMS), choices=NORMS, nonempty=True)
    q: float = checked(0.5, gt=0, lt=1)
    warmup: int = 100
    steps: int = 500
    batch_size: int = checked(128, ge=1)
    lr: float = checked(1e-3, gt=0)
    cifar_dir: str = ""  # CIFAR-10 python files to use instead of digits
    cifar_limit: int = checked(0, ge=0)  # first N CIFAR training images (0: all)
    vit_lr: float = checked(3e-3, gt=0)

    def check(self) -> None:
        """The CIFAR folder, LayerNorm as the baseline, warm-up shorter than training."""
        check_cifar_dir(self.cifar_dir)
        if "layernorm" not in self.norms:
            raise ConfigError("norms", f"must include layernorm (the baseline), got {self.norms}")
        if not 0 < self.warmup < self.steps:
            raise ConfigError("warmup", f"must be in (0, steps={self.steps}), got {self.warmup}")


def norm_spec(norm: str, q: float, warmup: int) -> str:
    """The :func:`~actlab.nn.norms.make_norm` name of a condition.

    The frozen condition keeps BatchNorm's momentum 0.1 during warm-up, as its references were
    measured with, rather than the shared ``min(1, 5 / freeze_after)`` default of
    :mod:`actlab.activations.running` (which at warm-up 50, the quick scale, is also 0.1).
    """
    if norm == "percentile":
        return f"percentile:q={q:g}"
    if norm == "percentile-frozen":
        return f"percentile:q={q:g}:momentum=0.1:freeze_after={warmup}"
    return norm


@register
class AccumulationStop(Experiment):
    """Throughput and accuracy of dynamic vs frozen percentile statistics."""

    name = "accumulation-stop"
    headline_figure = "accumulation_stop"
    description = ("Steps/s and accuracy with LayerNorm, BatchNorm, Percentile Centering and "
                   "Percentile Centering frozen after warm-up (\"Bug or Feature²\" §7)")
    Config = AccumulationStopConfig
    quick = {"steps": 200, "warmup": 50}
    full = {"steps": 1500, "warmup": 300}
    default_seeds = 2
    seeds_per_unit = None

    def units(self, config: AccumulationStopConfig) -> list[dict[str, Any]]:
        """One unit per (model, norm)."""
        return [{"model": m, "norm": n} for m in config.models for n in config.norms]

    def run_unit(self, config: AccumulationStopConfig, unit: dict[str, Any], seeds: list[int],
                 ctx: UnitContext) -> UnitResult:
        """Train once per seed, timing every step."""
        from actlab.nn.classifiers import build_classifier
        from actlab.nn.norms import norm_modules
        from actlab.train.supervised import evaluate, train

        result = UnitResult()
        data = load_config_data(config)
        run = f"{unit['model']}/{unit['norm']}"
        spec = norm_spec(unit["norm"], config.q, config.warmup)
        # MLP: the norm before each activation; ViT and MaxViT: their transformer pre-norms
        # (as DiT's LayerNorms; MaxViT's convolutions keep BatchNorm).
        transformer = unit["model"] in TRANSFORMER_KINDS
        norm_args = {"norm": spec} if transformer else {"pre_norm": spec}
        activation = "gelu" if transformer else "relu"
        settings = adam_settings(config, unit["model"])
        with torch_threads(1):
            for seed in seeds:
                model = build_classifier(unit["model"], data, activation, seed=seed, **norm_args)
                # thread CPU time on the CPU, CUDA events on CUDA (see actlab.train.timing)
                clock = StepClock()
                clock.stamp()
                out = train(model, data.x_train, data.y_train, settings,
                            generator=torch.Generator().manual_seed(seed),
                            callbacks=[clock.callback()])
                if out.status != STATUS_OK:
                    record_diverged(result, out.status, run, seed, out.steps)
                    continue
                times = clock.intervals()
                warm, after = times[:config.warmup], times[config.warmup:]
                rate, noise = throughput(after)
                result.add(run, seed, config.steps, "", "steps_per_s_warmup", throughput(warm)[0])
                result.add(run, seed, config.steps, "", "steps_per_s", rate)
                result.add(run, seed, config.steps, "", "steps_per_s_noise", noise)
                result.add(run, seed, config.steps, "", "accuracy",
                           evaluate(model, data.x_test, data.y_test)["accuracy"])
                pcs = norm_modules(model)
                if pcs:
                    result.add(run, seed, config.steps, "", "stat_computations",
                               float(np.mean([m.stats_computed for m in pcs])))
        return result

    def summarize(self, config: AccumulationStopConfig, table: pd.DataFrame,
                  results: list[dict[str, Any]], ctx: RunContext) -> dict:
        """Per model and norm: steps/s, ratio to LayerNorm, accuracy."""
        summary = build_summary(config, table, results)
        if ctx.draw:  # the run's figures; not redrawn for each seed alone
            draw_figures(summary["models"], ctx)
        return summary

    def claims(self, summary: dict) -> list[Claim]:
        """Frozen at least as fast as LayerNorm; dynamic slower; accuracy preserved."""
        return summary_claims(summary)
