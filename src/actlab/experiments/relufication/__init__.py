"""``relufication``: train with GELU, swap in ReLU, fine-tune one epoch.

"Bug or Feature²" §5.1, Table 3.

Each model trains with GELU on digits; then :func:`actlab.patch_` replaces every GELU by
ReLU and the model fine-tunes for one epoch. Accuracy, negative share of activation
inputs and post-activation sparsity are measured before the swap, right after it (no
fine-tuning) and after fine-tuning. The paper reports 55-74% sparsity after ReLUfication
with less than 2 pp accuracy loss, and sparsity close to the negative share.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch

from actlab.experiments.classifier_paper import (
    RELUFICATION,
    ClassifierScale,
    classifier_settings,
    classifier_workloads,
)
from actlab.experiments.relufication.claims import claims as summary_claims
from actlab.experiments.relufication.figures import draw_figures
from actlab.experiments.relufication.summary import build_summary
from actlab.nn.classifiers import MODEL_KINDS
from actlab.recipes.image_classifier import (
    activation_statistics,
    check_cifar_dir,
    fit_and_measure,
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
from actlab.train.settings import TrainSettings
from actlab.train.supervised import evaluate, torch_threads, train


@dataclass
class ReluficationConfig(ClassifierScale):
    """Models and training of the ReLUfication study (``size``, ``training`` and
    ``max_steps``: :class:`~actlab.experiments.classifier_paper.ClassifierScale`)."""

    models: list[str] = checked(default_factory=lambda: list(MODEL_KINDS), choices=MODEL_KINDS,
                                nonempty=True)
    steps: int = checked(500, ge=1)
    finetune_epochs: int = checked(1, ge=0)
    batch_size: int = checked(128, ge=1)
    lr: float = checked(1e-3, gt=0)
    cifar_dir: str = ""  # CIFAR-10 python files to use instead of digits
    cifar_limit: int = checked(0, ge=0)  # first N CIFAR training images (0: all)
    vit_lr: float = checked(3e-3, gt=0)
    finetune_lr: float = checked(1e-3, gt=0)
    threads: int = checked(1, ge=1)

    def check(self) -> None:
        """The CIFAR folder, when one is given, must hold CIFAR-10; a paper training for
        every model under ``training="paper"``."""
        check_cifar_dir(self.cifar_dir)
        self.check_paper_kinds(self.models)


@register
class Relufication(Experiment):
    """GELU -> ReLU conversion by brief fine-tuning."""

    name = "relufication"
    headline_figure = "relufication"
    description = ("Train with GELU, swap to ReLU, fine-tune one epoch (\"Bug or Feature²\" §5.1, "
                   "Table 3)")
    Config = ReluficationConfig
    quick = {"steps": 200}
    full = {"steps": 1500}
    paper = RELUFICATION
    default_seeds = 2
    seeds_per_unit = None

    def units(self, config: ReluficationConfig) -> list[dict[str, Any]]:
        """One unit per model."""
        return [{"model": m} for m in config.models]

    def run_unit(self, config: ReluficationConfig, unit: dict[str, Any], seeds: list[int],
                 ctx: UnitContext) -> UnitResult:
        """Train GELU, measure, patch to ReLU, measure, fine-tune, measure."""
        import actlab
        from actlab.nn.classifiers import build_classifier

        result = UnitResult()
        data = load_config_data(config)
        run = unit["model"]
        settings = classifier_settings(config, unit["model"], len(data.x_train))
        epoch = math.ceil(len(data.x_train) / config.batch_size)
        finetune = TrainSettings(optimizer="adam", lr=config.finetune_lr, batch_size=config.batch_size,
                                 steps=max(1, config.finetune_epochs * epoch))

        def measure(model, phase: str, seed: int, step: int) -> None:
            stats = activation_statistics(model, data.x_test).get("mean", {})
            result.add(run, seed, step, phase, "accuracy", evaluate(model, data.x_test, data.y_test)["accuracy"])
            result.add(run, seed, step, phase, "neg_frac", stats.get("preact_neg_frac", math.nan))
            result.add(run, seed, step, phase, "sparsity", stats.get("sparsity", math.nan))

        with torch_threads(config.threads):
            for seed in seeds:
                model = build_classifier(unit["model"], data, "gelu", seed=seed,
                                         size=config.size)
                out = fit_and_measure(model, data, settings, seed=seed, progress=ctx.progress)
                if out.status != STATUS_OK:
                    record_diverged(result, out.status, run, seed, out.steps, "before")
                    continue
                trained = settings.steps  # config.steps unless the paper's epochs set them
                measure(model, "before", seed, trained)
                replaced = actlab.patch_(model, "relu")
                result.add(run, seed, trained, "swapped", "sites_replaced", len(replaced))
                measure(model, "swapped", seed, trained)
                tuned = train(model, data.x_train, data.y_train, finetune,
                              generator=torch.Generator().manual_seed(seed + 1))
                if tuned.status != STATUS_OK:
                    record_diverged(result, tuned.status, run, seed, trained + tuned.steps,
                                    "after")
                    continue
                measure(model, "after", seed, trained + tuned.steps)
        return result

    def workloads(self, config: ReluficationConfig, unit: dict[str, Any]) -> list:
        """What one seed of a model trains (``actlab plan``): its training and the fine-tuning
        epochs after the swap (measurements priced as two passes over the test set)."""
        from actlab.experiments.classifier_paper import cifar_shape

        n_train = cifar_shape(config).n_train
        epoch = math.ceil(n_train / config.batch_size)
        return classifier_workloads(config, unit["model"], {"activation": "gelu"},
                                    extra_steps=max(1, config.finetune_epochs * epoch))

    def summarize(self, config: ReluficationConfig, table: pd.DataFrame,
                  results: list[dict[str, Any]], ctx: RunContext) -> dict:
        """Per model and phase: mean ± sd of accuracy, negative share, sparsity."""
        summary = build_summary(config, table, results)
        if ctx.draw:  # the run's figures; not redrawn for each seed alone
            draw_figures(summary["models"], ctx)
        return summary

    def claims(self, summary: dict) -> list[Claim]:
        """Accuracy drop < 2 pp, sparsity 55-74%, sparsity close to the negative share."""
        return summary_claims(summary)
