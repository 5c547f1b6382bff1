"""``sparse-activations``: accuracy, negative share and sparsity of sparsity-inducing activations.

"Bug or Feature²" §5, Table 1 (and App. D.7 for the activations). ReLU, GELU, SiLU,
ReLU², GELU², clipped ReLU² (15, 50), NoisyReLU and SUGAR (B-SiLU surrogate gradient)
train on digits in CPU-scale models with different norms: the paper's MLP without norm,
with RMSNorm and with LayerNorm (the norm before each activation), the MLP with skips, a
small ResNet with BatchNorm and a small ViT with LayerNorm (a setup ``maxvit:layernorm``
adds a small MaxViT, :mod:`actlab.nn.maxvit`, as Table 9's model); and, as Table 1's GPT-nano
column, a byte-level GPT (setup ``gpt:layernorm`` or ``gpt:rmsnorm``, the norm of its blocks)
trained on the standard library's source with the language-model recipe (the ``gpt_*`` fields;
Muon + AdamW by default, as "Bug or Feature²" App. D.6). Each cell reports test accuracy (for
the GPT: the validation loss, as Table 1 reports test loss), the share of negative activation
inputs and the sparsity (``|a| < 1e-7``), mean ± sd over seeds; the GPT's two shares are
measured on fixed validation windows after training, averaged over its layers. The
classifiers also record ``linear_neg_frac``, the negative share of the linear layers' outputs
(App. D.1's "linear layer outputs", :mod:`actlab.experiments.sparse_activations.preact`): it
differs from ``neg_frac`` (the activation's input) where a norm sits in between.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from actlab.errors import ConfigError, config_check
from actlab.experiments.classifier_paper import (
    SPARSE_ACTIVATIONS,
    ClassifierScale,
    classifier_settings,
    classifier_workloads,
)
from actlab.experiments.sparse_activations.claims import claims as summary_claims
from actlab.experiments.sparse_activations.figures import draw_figures
from actlab.experiments.sparse_activations.preact import linear_neg_frac
from actlab.experiments.sparse_activations.summary import CLASSIFIER_METRICS, build_summary
from actlab.nn.classifiers import CLASSIFIER_KINDS, TRANSFORMER_KINDS
from actlab.recipes.gpt_cell import GPTCellFields, run_gpt_cell
from actlab.recipes.image_classifier import (
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
from actlab.train.supervised import torch_threads

ACTIVATIONS = ["relu", "gelu", "silu", "relu2", "gelu2", "relu2:clip=15", "relu2:clip=50",
               "noisy_relu", "sugar"]
SETUPS = ["mlp:none", "mlp:rmsnorm", "mlp:layernorm", "mlp-skip:none", "resnet:batchnorm",
          "vit:layernorm", "gpt:layernorm"]
GPT = "gpt"
GPT_NORMS = ("layernorm", "rmsnorm")


def parse_setup(setup: str) -> tuple[str, str]:
    """``"mlp:rmsnorm"`` -> ``("mlp", "rmsnorm")``; ``ConfigError`` if unknown."""
    from actlab.nn.norms import parse_norm

    model, _, norm = setup.partition(":")
    if model == GPT:
        if norm not in GPT_NORMS:
            raise ConfigError("setups", f"the GPT's norm in {setup!r} must be one of "
                                        f"{', '.join(GPT_NORMS)}")
        return model, norm
    if model not in CLASSIFIER_KINDS:
        raise ConfigError("setups", f"model {model!r} in {setup!r} must be one of "
                                    f"{', '.join((*CLASSIFIER_KINDS, GPT))}")
    config_check("setups", parse_norm, norm or "none")
    return model, norm or "none"


def setup_model_args(setup: str) -> dict[str, Any]:
    """``build_classifier`` arguments: ViT and MaxViT norms are their pre-norms, others the
    pre-activation norm."""
    model, norm = parse_setup(setup)
    return {"norm": norm} if model in TRANSFORMER_KINDS else {"pre_norm": norm}


@dataclass
class SparseActivationsConfig(GPTCellFields, ClassifierScale):
    """Activations, model/norm setups and training (``size``, ``training`` and ``max_steps``:
    :class:`~actlab.experiments.classifier_paper.ClassifierScale`)."""

    activations: list[str] = checked(default_factory=lambda: list(ACTIVATIONS), spec="activation",
                                     nonempty=True)
    setups: list[str] = checked(default_factory=lambda: list(SETUPS), nonempty=True)
    steps: int = checked(400, ge=1)
    batch_size: int = checked(128, ge=1)
    lr: float = checked(1e-3, gt=0)
    cifar_dir: str = ""  # CIFAR-10 python files to use instead of digits
    cifar_limit: int = checked(0, ge=0)  # first N CIFAR training images (0: all)
    vit_lr: float = checked(3e-3, gt=0)
    threads: int = checked(1, ge=1)
    # the GPT column (setups "gpt:<norm>"): the inherited gpt_* fields

    def check(self) -> None:
        """The CIFAR folder, every setup's model and norm, and the GPT column's scale."""
        check_cifar_dir(self.cifar_dir)
        kinds = []
        for setup in self.setups:
            model, norm = parse_setup(setup)
            if model == GPT:
                self.lm_scale(norm)
            else:
                kinds.append(model)
        self.check_paper_kinds(kinds)


@register
class SparseActivations(Experiment):
    """Table 1 of "Bug or Feature²" at CPU scale: activation x (model, norm)."""

    name = "sparse-activations"
    headline_figure = "sparse_activations"
    description = ("Accuracy / negative share / sparsity of relu, gelu, silu, relu2, gelu2, clipped "
                   "relu2, noisy_relu, sugar across models and norms (\"Bug or Feature²\" §5, "
                   "Table 1)")
    Config = SparseActivationsConfig
    quick = {"steps": 100, "setups": ["mlp:none", "mlp:layernorm", "resnet:batchnorm", "vit:layernorm",
                                      "gpt:layernorm"],
             "gpt_steps": 60, "gpt_n_layer": 1, "gpt_n_embd": 32, "gpt_block_size": 32,
             "gpt_batch_size": 8, "gpt_probe_batches": 2}
    full = {"steps": 1500}
    paper = SPARSE_ACTIVATIONS
    default_seeds = 2
    seeds_per_unit = None  # all seeds of a cell in one unit

    def units(self, config: SparseActivationsConfig) -> list[dict[str, Any]]:
        """One unit per (setup, activation)."""
        return [{"setup": s, "activation": a} for s in config.setups for a in config.activations]

    def run_unit(self, config: SparseActivationsConfig, unit: dict[str, Any], seeds: list[int],
                 ctx: UnitContext) -> UnitResult:
        """Train the cell's model once per seed."""
        from actlab.nn.classifiers import build_classifier

        result = UnitResult()
        model_kind, norm = parse_setup(unit["setup"])
        run = f"{unit['setup']}/{unit['activation']}"
        if model_kind == GPT:
            return run_gpt_cell(config.lm_scale(norm), run, seeds, ctx,
                                activation=unit["activation"])
        data = load_config_data(config)
        settings = classifier_settings(config, model_kind, len(data.x_train))
        with torch_threads(config.threads):
            for seed in seeds:
                model = build_classifier(model_kind, data, unit["activation"], seed=seed,
                                         size=config.size, **setup_model_args(unit["setup"]))
                out = fit_and_measure(model, data, settings, seed=seed, progress=ctx.progress)
                if out.status != STATUS_OK:
                    record_diverged(result, out.status, run, seed, out.steps)
                    continue
                for metric in CLASSIFIER_METRICS:
                    result.add(run, seed, out.steps, "", metric, getattr(out, metric))
                # App. D.1's quantity: the linear layers' outputs, before any norm
                result.add(run, seed, out.steps, "", "linear_neg_frac",
                           linear_neg_frac(model, data.x_test))
        return result

    def workloads(self, config: SparseActivationsConfig, unit: dict[str, Any]) -> list:
        """What one seed of a cell trains (``actlab plan``)."""
        model_kind, norm = parse_setup(unit["setup"])
        if model_kind == GPT:
            from actlab.experiments.lm_paper import gpt_workloads

            return gpt_workloads(config.lm_scale(norm), activation=unit["activation"])
        return classifier_workloads(config, model_kind, {"activation": unit["activation"],
                                                         **setup_model_args(unit["setup"])})

    def summarize(self, config: SparseActivationsConfig, table: pd.DataFrame,
                  results: list[dict[str, Any]], ctx: RunContext) -> dict:
        """The table: setup -> activation -> mean and sd of each metric over seeds."""
        summary = build_summary(config, table, results)
        if ctx.draw:  # the run's figures; not redrawn for each seed alone
            draw_figures(summary["table"], config.activations, ctx)
        return summary

    def claims(self, summary: dict) -> list[Claim]:
        """Table 1's qualitative findings, as far as our setups cover them."""
        return summary_claims(summary)
