"""``sparse-activations``: accuracy, negative share and sparsity of sparsity-inducing activations.

Seed 003 §5, Table 1 (and App. D.7 for the activations). ReLU, GELU, SiLU, ReLU², GELU²,
clipped ReLU² (15, 50), NoisyReLU and SUGAR (B-SiLU surrogate gradient) train on digits
in CPU-scale models with different norms: the seed's MLP without norm, with RMSNorm and
with LayerNorm (the norm before each activation), the MLP with skips, a small ResNet with
BatchNorm and a small ViT with LayerNorm. Each cell reports test accuracy, the share of
negative activation inputs and the sparsity (``|a| < 1e-7``), mean ± sd over seeds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from actlab.errors import ConfigError, config_check
from actlab.experiments._common import check_activation_specs
from actlab.experiments._image_common import (
    adam_settings,
    data_label,
    failed_units,
    load_config_data,
    mean_and_sd,
    record_diverged,
    seeds_in,
)
from actlab.experiments._sparse_activations_claims import sparse_activations_claims
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

ACTIVATIONS = ["relu", "gelu", "silu", "relu2", "gelu2", "relu2:clip=15", "relu2:clip=50",
               "noisy_relu", "sugar"]
SETUPS = ["mlp:none", "mlp:rmsnorm", "mlp:layernorm", "mlp-skip:none", "resnet:batchnorm",
          "vit:layernorm"]
METRICS = ("accuracy", "neg_frac", "sparsity")


def parse_setup(setup: str) -> tuple[str, str]:
    """``"mlp:rmsnorm"`` -> ``("mlp", "rmsnorm")``; ``ConfigError`` if unknown."""
    from actlab.nn.norms import parse_norm

    model, _, norm = setup.partition(":")
    if model not in MODEL_KINDS:
        raise ConfigError("setups", f"model {model!r} in {setup!r} must be one of {', '.join(MODEL_KINDS)}")
    config_check("setups", parse_norm, norm or "none")
    return model, norm or "none"


def setup_model_args(setup: str) -> dict[str, Any]:
    """``build_classifier`` arguments: ViT norms are its pre-norms, others the pre-activation norm."""
    model, norm = parse_setup(setup)
    return {"norm": norm} if model == "vit" else {"pre_norm": norm}


@dataclass
class SparseActivationsConfig:
    """Activations, model/norm setups and training."""

    activations: list[str] = field(default_factory=lambda: list(ACTIVATIONS))
    setups: list[str] = field(default_factory=lambda: list(SETUPS))
    steps: int = 400
    batch_size: int = 128
    lr: float = 1e-3
    cifar_dir: str = ""  # CIFAR-10 python files to use instead of digits
    cifar_limit: int = 0  # first N CIFAR training images (0: all)
    vit_lr: float = 3e-3
    threads: int = 1

    def __post_init__(self) -> None:
        check_data_fields(self.cifar_dir, self.cifar_limit)
        if not self.activations or not self.setups:
            raise ConfigError("activations", "need at least one activation and one setup")
        check_activation_specs(self.activations)
        for setup in self.setups:
            parse_setup(setup)
        if self.steps < 1 or self.batch_size < 1 or self.threads < 1:
            raise ConfigError("steps", "steps, batch_size and threads must be >= 1")
        if self.lr <= 0 or self.vit_lr <= 0:
            raise ConfigError("lr", "learning rates must be > 0")


@register
class SparseActivations(Experiment):
    """Table 1 of seed 003 at CPU scale: activation x (model, norm)."""

    name = "sparse-activations"
    headline_figure = "sparse_activations"
    description = ("Accuracy / negative share / sparsity of relu, gelu, silu, relu2, gelu2, clipped "
                   "relu2, noisy_relu, sugar across models and norms (seed 003 §5, Table 1)")
    Config = SparseActivationsConfig
    quick = {"steps": 100, "setups": ["mlp:none", "mlp:layernorm", "resnet:batchnorm", "vit:layernorm"]}
    full = {"steps": 1500}
    default_seeds = 2
    seeds_per_unit = None  # all seeds of a cell in one unit

    def units(self, config: SparseActivationsConfig) -> list[dict[str, Any]]:
        """One unit per (setup, activation)."""
        return [{"setup": s, "activation": a} for s in config.setups for a in config.activations]

    def run_unit(self, config: SparseActivationsConfig, unit: dict[str, Any], seeds: list[int],
                 ctx: UnitContext) -> UnitResult:
        """Train the cell's model once per seed."""
        from actlab.train.classify import build_classifier, fit_and_measure

        result = UnitResult()
        model_kind, _ = parse_setup(unit["setup"])
        run = f"{unit['setup']}/{unit['activation']}"
        data = load_config_data(config)
        settings = adam_settings(config, model_kind)
        with torch_threads(config.threads):
            for seed in seeds:
                model = build_classifier(model_kind, data, unit["activation"], seed=seed,
                                         **setup_model_args(unit["setup"]))
                out = fit_and_measure(model, data, settings, seed=seed, progress=ctx.progress)
                if out.status != STATUS_OK:
                    record_diverged(result, out.status, run, seed, out.steps)
                    continue
                for metric in METRICS:
                    result.add(run, seed, out.steps, "", metric, getattr(out, metric))
        return result

    def summarize(self, config: SparseActivationsConfig, table: pd.DataFrame,
                  results: list[dict[str, Any]], ctx: RunContext) -> dict:
        """The table: setup -> activation -> mean and sd of each metric over seeds."""
        cells: dict[str, dict[str, Any]] = {}
        for setup in config.setups:
            for act in config.activations:
                df = table[table["run"] == f"{setup}/{act}"]
                cell: dict[str, Any] = {"seeds": int(df["seed"].nunique())}
                for metric in METRICS:
                    values = df[df["metric"] == metric]["value"]
                    cell[f"{metric}_mean"], cell[f"{metric}_sd"] = mean_and_sd(values)
                diverged = df[(df["metric"] == "train_loss") & df["value"].isna()]
                cell["diverged_seeds"] = int(len(diverged))
                cells.setdefault(setup, {})[act] = cell
        summary = {
            "scale": {"steps": config.steps, "seeds": seeds_in(table),
                      "data": data_label(config), "setups": config.setups},
            "failed_or_diverged": failed_units(results),
            "table": cells,
            "table_text": format_table(cells, config.activations),
        }
        self._figure(cells, config, ctx)
        return summary

    def _figure(self, cells: dict[str, Any], config: SparseActivationsConfig, ctx: RunContext) -> None:
        plt = pyplot()

        fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
        for setup, row in cells.items():
            xs = np.arange(len(config.activations))
            acc = [row[a]["accuracy_mean"] if row[a]["accuracy_mean"] is not None else np.nan
                   for a in config.activations]
            sp = [row[a]["sparsity_mean"] if row[a]["sparsity_mean"] is not None else np.nan
                  for a in config.activations]
            axes[0].plot(xs, acc, "o-", label=setup)
            axes[1].plot(xs, sp, "o-", label=setup)
        for ax, title in zip(axes, ("test accuracy", "sparsity (|a| < 1e-7)")):
            ax.set_xticks(np.arange(len(config.activations)))
            ax.set_xticklabels(config.activations, rotation=45, ha="right", fontsize=7)
            ax.set_title(title)
        axes[0].legend(fontsize=7)
        ctx.save_figure(fig, "sparse_activations")

    def claims(self, summary: dict) -> list[Claim]:
        """Table 1's qualitative findings, as far as our setups cover them."""
        return sparse_activations_claims(summary)


def format_table(cells: dict[str, Any], activations: list[str]) -> list[str]:
    """Rows ``setup | act: acc / neg / sparsity`` as text (means ± sd)."""
    lines = []
    for setup, row in cells.items():
        parts = []
        for act in activations:
            c = row[act]

            def fmt(metric: str, c: dict = c) -> str:
                m, s = c[f"{metric}_mean"], c[f"{metric}_sd"]
                if m is None:
                    return "n/a"
                return f"{m:.3f}" + (f"±{s:.3f}" if s is not None else "")

            parts.append(f"{act}: {fmt('accuracy')} / {fmt('neg_frac')} / {fmt('sparsity')}")
        lines.append(f"{setup} | " + " | ".join(parts))
    return lines
