"""``relufication``: train with GELU, swap in ReLU, fine-tune one epoch (seed 003 §5, Table 3).

Each model trains with GELU on digits; then :func:`actlab.patch_` replaces every GELU by
ReLU and the model fine-tunes for one epoch. Accuracy, negative share of activation
inputs and post-activation sparsity are measured before the swap, right after it (no
fine-tuning) and after fine-tuning. The seed reports 55-74% sparsity after ReLUfication
with less than 2 pp accuracy loss, and sparsity close to the negative share.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch

from actlab.errors import ConfigError
from actlab.experiments._image_common import (
    adam_settings,
    check_models,
    data_label,
    failed_units,
    load_config_data,
    mean_and_sd,
    record_diverged,
    seeds_in,
)
from actlab.plotting import pyplot
from actlab.runner.claims import claim_id
from actlab.runner.experiment import (
    STATUS_OK,
    Claim,
    Experiment,
    RunContext,
    UnitContext,
    UnitResult,
    register,
)
from actlab.train.classify import MODEL_KINDS, TrainSettings, check_data_fields, torch_threads

PHASES = ("before", "swapped", "after")


@dataclass
class ReluficationConfig:
    """Models and training of the ReLUfication study."""

    models: list[str] = field(default_factory=lambda: list(MODEL_KINDS))
    steps: int = 500
    finetune_epochs: int = 1
    batch_size: int = 128
    lr: float = 1e-3
    cifar_dir: str = ""  # CIFAR-10 python files to use instead of digits
    cifar_limit: int = 0  # first N CIFAR training images (0: all)
    vit_lr: float = 3e-3
    finetune_lr: float = 1e-3
    threads: int = 1

    def __post_init__(self) -> None:
        check_data_fields(self.cifar_dir, self.cifar_limit)
        check_models(self.models)
        if self.steps < 1 or self.finetune_epochs < 0 or self.batch_size < 1 or self.threads < 1:
            raise ConfigError("steps", "steps, batch_size, threads >= 1 and finetune_epochs >= 0 needed")
        if min(self.lr, self.vit_lr, self.finetune_lr) <= 0:
            raise ConfigError("lr", "learning rates must be > 0")


@register
class Relufication(Experiment):
    """GELU -> ReLU conversion by brief fine-tuning."""

    name = "relufication"
    headline_figure = "relufication"
    description = "Train with GELU, swap to ReLU, fine-tune one epoch (seed 003 §5, Table 3)"
    Config = ReluficationConfig
    quick = {"steps": 200}
    full = {"steps": 1500}
    default_seeds = 2
    seeds_per_unit = None

    def units(self, config: ReluficationConfig) -> list[dict[str, Any]]:
        """One unit per model."""
        return [{"model": m} for m in config.models]

    def run_unit(self, config: ReluficationConfig, unit: dict[str, Any], seeds: list[int],
                 ctx: UnitContext) -> UnitResult:
        """Train GELU, measure, patch to ReLU, measure, fine-tune, measure."""
        import actlab
        from actlab.train.classify import (
            activation_statistics,
            build_classifier,
            evaluate,
            fit_and_measure,
            train,
        )

        result = UnitResult()
        data = load_config_data(config)
        run = unit["model"]
        settings = adam_settings(config, unit["model"])
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
                model = build_classifier(unit["model"], data, "gelu", seed=seed)
                out = fit_and_measure(model, data, settings, seed=seed, progress=ctx.progress)
                if out.status != STATUS_OK:
                    record_diverged(result, out.status, run, seed, out.steps, "before")
                    continue
                measure(model, "before", seed, config.steps)
                replaced = actlab.patch_(model, "relu")
                result.add(run, seed, config.steps, "swapped", "sites_replaced", len(replaced))
                measure(model, "swapped", seed, config.steps)
                tuned = train(model, data.x_train, data.y_train, finetune,
                              generator=torch.Generator().manual_seed(seed + 1))
                if tuned.status != STATUS_OK:
                    record_diverged(result, tuned.status, run, seed, config.steps + tuned.steps,
                                    "after")
                    continue
                measure(model, "after", seed, config.steps + tuned.steps)
        return result

    def summarize(self, config: ReluficationConfig, table: pd.DataFrame,
                  results: list[dict[str, Any]], ctx: RunContext) -> dict:
        """Per model and phase: mean ± sd of accuracy, negative share, sparsity."""
        models: dict[str, Any] = {}
        for model, df in table.groupby("run"):
            entry: dict[str, Any] = {}
            for phase in PHASES:
                for metric in ("accuracy", "neg_frac", "sparsity"):
                    v = df[(df["layer"] == phase) & (df["metric"] == metric)]["value"]
                    entry[f"{phase}_{metric}"], entry[f"{phase}_{metric}_sd"] = mean_and_sd(v)
            if entry["before_accuracy"] is not None and entry["after_accuracy"] is not None:
                entry["accuracy_drop_pp"] = 100 * (entry["before_accuracy"] - entry["after_accuracy"])
            models[str(model)] = entry
        self._figure(models, ctx)
        return {"scale": {"steps": config.steps, "finetune_epochs": config.finetune_epochs,
                          "seeds": seeds_in(table),
                          "data": data_label(config)},
                "failed_or_diverged": failed_units(results),
                "models": models}

    def _figure(self, models: dict[str, Any], ctx: RunContext) -> None:
        plt = pyplot()

        fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
        names = list(models)
        xs = np.arange(len(names))
        for i, phase in enumerate(PHASES):
            acc = [models[n][f"{phase}_accuracy"] or np.nan for n in names]
            sp = [models[n][f"{phase}_sparsity"] or np.nan for n in names]
            axes[0].bar(xs + (i - 1) * 0.27, acc, 0.27, label=phase)
            axes[1].bar(xs + (i - 1) * 0.27, sp, 0.27, label=phase)
        for ax, title in zip(axes, ("test accuracy", "post-activation sparsity")):
            ax.set_xticks(xs)
            ax.set_xticklabels(names)
            ax.set_title(title)
        axes[0].legend(fontsize=7)
        ctx.save_figure(fig, "relufication")

    def claims(self, summary: dict) -> list[Claim]:
        """Accuracy drop < 2 pp, sparsity 55-74%, sparsity close to the negative share."""
        claims = []
        src = "seed 003 §5.1, Table 3"
        for model, e in summary.get("models", {}).items():
            if e.get("accuracy_drop_pp") is None or e.get("after_sparsity") is None:
                continue
            claims.append(Claim(f"{model}: ReLUfication costs < 2 pp accuracy",
                                f"{e['before_accuracy']:.3f} -> {e['after_accuracy']:.3f} "
                                f"({e['accuracy_drop_pp']:+.1f} pp)", e["accuracy_drop_pp"] < 2.0, src,
                                id=claim_id(self.name, model, "accuracy-drop-below-2pp"),
                                value=e["accuracy_drop_pp"], comparison="<", threshold=2.0))
            claims.append(Claim(f"{model}: sparsity after ReLUfication in the published 55-74% range",
                                f"{e['after_sparsity']:.3f}", 0.55 <= e["after_sparsity"] <= 0.74, src,
                                id=claim_id(self.name, model, "sparsity-in-published-range"),
                                value=e["after_sparsity"], comparison="compound", threshold=0.55))
            if e.get("after_neg_frac") is not None:
                gap = abs(e["after_sparsity"] - e["after_neg_frac"])
                claims.append(Claim(f"{model}: sparsity after conversion matches the negative share "
                                    "(|diff| < 0.05)", f"{e['after_sparsity']:.3f} vs {e['after_neg_frac']:.3f}",
                                    gap < 0.05, src,
                                    id=claim_id(self.name, model, "sparsity-matches-negative-share"),
                                    value=gap, comparison="<", threshold=0.05))
        return claims

