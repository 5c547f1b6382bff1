"""``sparsity``: accuracy against controlled activation sparsity, and the sparsity cliff.

Seed 003 §4, App. B.2. Two mechanisms set the share of zero activations:

* Percentile Centering (``percentile``): ReLU after a norm that shifts each feature by its
  ``q``-th percentile (no learned shift, so the level holds), levels ``q``;
* Top-K (``topk``): GELU keeping the ``K`` largest activations, levels ``K``;

on four CPU-scale models trained on scikit-learn's digits: the seed's MLP, the MLP with
skips, a small ResNet (BatchNorm flavour of the percentile norm) and a small ViT (the
percentile norm inside its MLPs). Each point records test accuracy, the share of negative
activation inputs and the measured sparsity (``|a| < 1e-7``). Accuracies are normalised by
the best of their (model, method) group and ``a(s) = A - B s^N`` is fitted to all points
(:func:`actlab.theory.fit.fit_cliff`); ``cliff_sparsity`` is where the fit is 10% below A.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from actlab.errors import ConfigError
from actlab.experiments._image_common import (
    adam_settings,
    check_models,
    data_label,
    failed_units,
    load_config_data,
    record_diverged,
    seeds_in,
)
from actlab.experiments._sparsity_claims import METHODS, sparsity_claims
from actlab.plotting import pyplot
from actlab.runner.experiment import (
    STATUS_OK,
    Claim,
    Experiment,
    RunContext,
    UnitContext,
    UnitResult,
    register,
)
from actlab.train.classify import MODEL_KINDS, check_data_fields, torch_threads

PUBLISHED = {"A": 0.978, "B": 0.635, "N": 16.72, "r2": 0.565}  # seed 003 §4.1, N = 79 points


@dataclass
class SparsityConfig:
    """Models, levels and training of the sparsity sweep."""

    models: list[str] = field(default_factory=lambda: list(MODEL_KINDS))
    percentile_levels: list[float] = field(default_factory=lambda: [0.1, 0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 0.98])
    topk_levels: list[float] = field(default_factory=lambda: [0.9, 0.5, 0.3, 0.2, 0.1, 0.05, 0.02])
    steps: int = 500
    batch_size: int = 128
    lr: float = 1e-3
    cifar_dir: str = ""  # CIFAR-10 python files to use instead of digits
    cifar_limit: int = 0  # first N CIFAR training images (0: all)
    vit_lr: float = 3e-3
    threads: int = 1

    def __post_init__(self) -> None:
        check_data_fields(self.cifar_dir, self.cifar_limit)
        check_models(self.models)
        for name in ("percentile_levels", "topk_levels"):
            levels = getattr(self, name)
            if any(not 0.0 < v < 1.0 for v in levels):
                raise ConfigError(name, f"levels must lie in (0, 1), got {levels}")
        if len(self.percentile_levels) + len(self.topk_levels) < 3:
            raise ConfigError("percentile_levels", "need at least 3 points in all to fit the cliff")
        if self.steps < 1 or self.batch_size < 1 or self.threads < 1:
            raise ConfigError("steps", "steps, batch_size and threads must be >= 1")
        if self.lr <= 0 or self.vit_lr <= 0:
            raise ConfigError("lr", "learning rates must be > 0")


def point_model_args(method: str, level: float) -> dict[str, Any]:
    """Activation spec and pre-activation norm of one (method, level) point."""
    if method == "percentile":
        return {"activation": "relu", "pre_norm": f"percentile:q={level:g}", "norm_bias": False}
    return {"activation": f"gelu:topk={level:g}", "pre_norm": None, "norm_bias": True}


@register
class Sparsity(Experiment):
    """Accuracy vs controlled sparsity (Percentile Centering, Top-K) and the cliff fit."""

    name = "sparsity"
    headline_figure = "sparsity_cliff"
    description = ("Accuracy against Percentile-Centering and Top-K sparsity on MLP, MLP+skip, "
                   "ResNet and ViT (digits), with the a(s) = A - B s^N cliff fit (seed 003 §4)")
    Config = SparsityConfig
    quick = {"steps": 150, "percentile_levels": [0.5, 0.7, 0.85, 0.95],
             "topk_levels": [0.5, 0.2, 0.1, 0.03]}
    full = {"steps": 1500}
    default_seeds = 1
    seeds_per_unit = 1

    def units(self, config: SparsityConfig) -> list[dict[str, Any]]:
        """One unit per (model, method, level)."""
        return [{"model": model, "method": method, "level": level}
                for model in config.models
                for method, levels in (("percentile", config.percentile_levels),
                                       ("topk", config.topk_levels))
                for level in levels]

    def run_unit(self, config: SparsityConfig, unit: dict[str, Any], seeds: list[int],
                 ctx: UnitContext) -> UnitResult:
        """Train the point's model per seed; rows accuracy, neg_frac, sparsity."""
        from actlab.train.classify import build_classifier, fit_and_measure

        result = UnitResult()
        run = f"{unit['model']}/{unit['method']}/{unit['level']:g}"
        data = load_config_data(config)
        settings = adam_settings(config, unit["model"])
        with torch_threads(config.threads):
            for seed in seeds:
                model = build_classifier(unit["model"], data, seed=seed,
                                         **point_model_args(unit["method"], unit["level"]))
                out = fit_and_measure(model, data, settings, seed=seed, progress=ctx.progress)
                if out.status != STATUS_OK:
                    record_diverged(result, out.status, run, seed, out.steps)
                    continue
                for metric in ("accuracy", "neg_frac", "sparsity", "final_loss"):
                    result.add(run, seed, out.steps, "", metric if metric != "final_loss"
                               else "train_loss", getattr(out, metric))
        return result

    def summarize(self, config: SparsityConfig, table: pd.DataFrame, results: list[dict[str, Any]],
                  ctx: RunContext) -> dict:
        """Points, normalised accuracy, the cliff fit, figures."""
        from actlab.theory.fit import fit_cliff, normalize_by_group

        points = []
        for run, df in table.groupby("run"):
            model, method, level = str(run).split("/")
            values = df.groupby("metric")["value"].mean()
            if not all(math.isfinite(values.get(k, math.nan)) for k in ("accuracy", "sparsity")):
                continue
            points.append({"model": model, "method": method, "level": float(level),
                           "accuracy": float(values["accuracy"]),
                           "neg_frac": float(values.get("neg_frac", math.nan)),
                           "sparsity": float(values["sparsity"])})
        summary: dict[str, Any] = {
            "scale": {"steps": config.steps, "seeds": seeds_in(table),
                      "data": data_label(config, "digits (1438 train / 359 test)"),
                      "models": config.models,
                      "percentile_levels": config.percentile_levels,
                      "topk_levels": config.topk_levels},
            "failed_or_diverged": failed_units(results),
            "published": PUBLISHED,
        }
        if len(points) >= 3:
            norm = normalize_by_group([p["accuracy"] for p in points],
                                      [(p["model"], p["method"]) for p in points])
            for p, value in zip(points, norm):
                p["normalized_accuracy"] = float(value)
            fit = fit_cliff([p["sparsity"] for p in points], norm)
            summary.update({"A": fit.A, "B": fit.B, "N": fit.N, "r2": fit.r2,
                            "cliff_sparsity": fit.cliff_sparsity, "n_points": fit.n_points})
            summary["per_model"] = _per_model(points)
            self._figure(points, fit, ctx)
        else:
            summary.update({"A": None, "B": None, "N": None, "r2": None, "cliff_sparsity": None})
        summary["points"] = sorted(points, key=lambda p: (p["model"], p["method"], p["level"]))
        return summary

    def _figure(self, points: list[dict[str, Any]], fit: Any, ctx: RunContext) -> None:
        plt = pyplot()

        fig, ax = plt.subplots(figsize=(6.5, 4.2))
        markers = {"percentile": "o", "topk": "^"}
        for model in sorted({p["model"] for p in points}):
            for method in METHODS:
                sel = [p for p in points if p["model"] == model and p["method"] == method]
                if sel:
                    ax.scatter([p["sparsity"] for p in sel], [p["normalized_accuracy"] for p in sel],
                               marker=markers[method], label=f"{model} {method}", s=22)
        s = np.linspace(0, 1, 200)
        ax.plot(s, fit.predict(s), "k-", lw=1.2,
                label=f"fit A={fit.A:.3f} B={fit.B:.3f} N={fit.N:.2f} R²={fit.r2:.2f}")
        if fit.cliff_sparsity is not None:
            ax.axvline(fit.cliff_sparsity, color="k", ls=":", lw=1)
        ax.set_xlabel("measured sparsity")
        ax.set_ylabel("accuracy / best of its group")
        ax.legend(fontsize=6, ncol=2)
        ctx.save_figure(fig, "sparsity_cliff")

    def claims(self, summary: dict) -> list[Claim]:
        """The cliff, the plateau, skip robustness, Percentile Centering sets the level."""
        return sparsity_claims(summary)


def _per_model(points: list[dict[str, Any]]) -> dict[str, Any]:
    """Per (model, method): accuracy at the lowest and highest measured sparsity."""
    out: dict[str, Any] = {}
    for model in sorted({p["model"] for p in points}):
        for method in METHODS:
            sel = sorted((p for p in points if p["model"] == model and p["method"] == method),
                         key=lambda p: p["sparsity"])
            if sel:
                out[f"{model}/{method}"] = {
                    "least_sparse": {"sparsity": sel[0]["sparsity"], "accuracy": sel[0]["accuracy"]},
                    "most_sparse": {"sparsity": sel[-1]["sparsity"], "accuracy": sel[-1]["accuracy"]},
                }
    return out
