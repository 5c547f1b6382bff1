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

Beside the speed, each run records its weight drift (App. B.1.4, Fig. 12: Accumulation Stop
"does not disturb weight drift"): ``weight_mean_shift``, the change over training of the mean
weight of the layers that read an activation's output
(:mod:`actlab.experiments.accumulation_stop.drift`), compared between the frozen and the
dynamic percentiles. ``norm_input_mean_shift`` (the change over training of the mean input
of the norm layers) and ``centred_negative_share`` (the share of their outputs below zero at
the end, eval mode: the MLP ReLU's sparsity) show whether the frozen centre still sits where
the pre-activations are (:func:`~actlab.experiments.accumulation_stop.drift.norm_statistics`).

``image_dir=DIR`` trains on an image folder (``DIR/train``, ``DIR/val``; streamed, center
crops of ``image_size`` with RandAugment ``randaugment``) instead of the digits or CIFAR-10,
and ``training="paper"`` with ``size="paper"`` is App. D.5's MaxViT-T training (``--paper``:
:data:`~actlab.experiments.imagenet_paper.ACCUMULATION_STOP`); ``warmup`` is then checked
against the run's steps when it starts.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch

from actlab.errors import ConfigError
from actlab.experiments.accumulation_stop.claims import claims as summary_claims
from actlab.experiments.accumulation_stop.drift import (
    mean_weight,
    norm_statistics,
    post_activation_linears,
)
from actlab.experiments.accumulation_stop.figures import draw_figures
from actlab.experiments.accumulation_stop.summary import build_summary
from actlab.experiments.classifier_paper import ClassifierScale, classifier_settings
from actlab.experiments.imagenet_paper import ACCUMULATION_STOP
from actlab.nn.classifiers import CLASSIFIER_KINDS, TRANSFORMER_KINDS
from actlab.recipes.image_classifier import (
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
from actlab.runner.fields import checked
from actlab.train.supervised import torch_threads
from actlab.train.timing import StepClock, throughput

NORMS = ("layernorm", "batchnorm", "percentile", "percentile-frozen")


@dataclass
class AccumulationStopConfig(ClassifierScale):
    """Models, norms, percentile, warm-up and training length (``size``, ``training``,
    ``max_steps``: :class:`~actlab.experiments.classifier_paper.ClassifierScale`)."""

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
    image_dir: str = ""  # an image folder (train/, val/) instead of digits or CIFAR-10
    image_size: int = checked(224, ge=1)
    randaugment: str = ""  # a timm RandAugment config for the image folder ("": none)
    workers: int = checked(8, ge=1)
    eval_images: int = checked(0, ge=0)  # validation images measured (0: all)
    dtype: str = checked("float32", choices=("float32", "bfloat16"))  # bfloat16: autocast

    def check(self) -> None:
        """The data folders, LayerNorm as the baseline, warm-up shorter than training."""
        check_cifar_dir(self.cifar_dir)
        if self.image_dir:
            from actlab.data.image_stream import split_folders

            try:
                split_folders(self.image_dir)
            except FileNotFoundError as exc:
                raise ConfigError("image_dir", str(exc)) from None
            if self.training == "paper" and self.models != ["maxvit"]:
                raise ConfigError("models", f"the documents train maxvit alone on ImageNet, "
                                            f"got {self.models}")
        else:
            self.check_paper_kinds(self.models)
        if "layernorm" not in self.norms:
            raise ConfigError("norms", f"must include layernorm (the baseline), got {self.norms}")
        if self.training != "paper" and not 0 < self.warmup < self.steps:
            raise ConfigError("warmup", f"must be in (0, steps={self.steps}), got {self.warmup}")

    def settings(self, kind: str, n_train: int) -> Any:
        """The engine's settings of a model of ``kind`` on ``n_train`` training images."""
        if self.image_dir and self.training == "paper":
            from actlab.experiments.imagenet_paper import maxvit_settings

            settings = maxvit_settings(self, n_train)
        else:
            settings = classifier_settings(self, kind, n_train)
        settings = dataclasses.replace(settings, dtype=self.dtype)
        if not 0 < self.warmup < settings.steps:
            raise ConfigError("warmup", f"must be in (0, steps={settings.steps}), got "
                                        f"{self.warmup}")
        return settings


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
    paper = ACCUMULATION_STOP
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
        streams = None
        if config.image_dir:
            from actlab.experiments.accumulation_stop.folder import image_data

            data, streams = image_data(config, seeds[0])
        else:
            data = load_config_data(config)
        run = f"{unit['model']}/{unit['norm']}"
        spec = norm_spec(unit["norm"], config.q, config.warmup)
        # MLP: the norm before each activation; ViT and MaxViT: their transformer pre-norms
        # (as DiT's LayerNorms; MaxViT's convolutions keep BatchNorm).
        transformer = unit["model"] in TRANSFORMER_KINDS
        norm_args = {"norm": spec} if transformer else {"pre_norm": spec}
        activation = "gelu" if transformer else "relu"
        settings = config.settings(unit["model"], len(data.x_train))
        with torch_threads(1):
            for seed in seeds:
                model = build_classifier(unit["model"], data, activation, seed=seed,
                                         size=config.size, **norm_args)
                # App. B.1.4's drift: the mean of the weights that read an activation's output
                readers = post_activation_linears(model, data.x_test[:8]) \
                    if streams is None else []
                start_mean = mean_weight(readers)
                probe = data.x_test[:512] if streams is None else None
                start_input = norm_statistics(model, probe)[0] if probe is not None else None
                # thread CPU time on the CPU, CUDA events on CUDA (see actlab.train.timing)
                clock = StepClock()
                clock.stamp()
                if streams is not None:
                    from actlab.recipes.stream_classifier import train_on_stream

                    out = train_on_stream(model, streams.train, settings,
                                          callbacks=[clock.callback()], progress=ctx.progress)
                else:
                    out = train(model, data.x_train, data.y_train, settings,
                                generator=torch.Generator().manual_seed(seed),
                                callbacks=[clock.callback()])
                if out.status != STATUS_OK:
                    record_diverged(result, out.status, run, seed, out.steps)
                    continue
                times = clock.intervals()
                warm, after = times[:config.warmup], times[config.warmup:]
                rate, noise = throughput(after)
                steps = settings.steps
                result.add(run, seed, steps, "", "steps_per_s_warmup", throughput(warm)[0])
                result.add(run, seed, steps, "", "steps_per_s", rate)
                result.add(run, seed, steps, "", "steps_per_s_noise", noise)
                if streams is not None:
                    from actlab.recipes.stream_classifier import evaluate_stream

                    accuracy = evaluate_stream(model, streams.val,
                                               limit=config.eval_images or None)["accuracy"]
                else:
                    accuracy = evaluate(model, data.x_test, data.y_test)["accuracy"]
                result.add(run, seed, steps, "", "accuracy", accuracy)
                if readers:
                    result.add(run, seed, steps, "", "weight_mean_shift",
                               mean_weight(readers) - start_mean)
                if start_input is not None and math.isfinite(start_input):
                    end_input, negative = norm_statistics(model, probe)
                    result.add(run, seed, steps, "", "norm_input_mean_shift",
                               end_input - start_input)
                    result.add(run, seed, steps, "", "centred_negative_share", negative)
                pcs = norm_modules(model)
                if pcs:
                    result.add(run, seed, steps, "", "stat_computations",
                               float(np.mean([m.stats_computed for m in pcs])))
        if streams is not None:
            streams.close()
        return result

    def workloads(self, config: AccumulationStopConfig, unit: dict[str, Any]) -> list:
        """What one seed of a (model, norm) unit trains (``actlab plan``), with its test
        evaluation."""
        from actlab.experiments.classifier_paper import cifar_shape
        from actlab.experiments.imagenet_paper import folder_shape, image_workload
        from actlab.nn.classifiers import build_classifier

        data = folder_shape(config.image_dir, config.image_size) if config.image_dir \
            else cifar_shape(config)
        n_test = getattr(data, "n_val", getattr(data, "n_test", 0))
        transformer = unit["model"] in TRANSFORMER_KINDS
        spec = norm_spec(unit["norm"], config.q, config.warmup)
        norm_args = {"norm": spec} if transformer else {"pre_norm": spec}
        settings = config.settings(unit["model"], data.n_train)
        return [image_workload(
            f"{unit['model']} ({config.size}, {unit['norm']})",
            lambda: build_classifier(unit["model"], data, "gelu" if transformer else "relu",
                                     size=config.size, **norm_args),
            data.image_shape, settings.steps, settings.batch_size, settings.optimizer,
            min(config.eval_images or n_test, n_test))]

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
