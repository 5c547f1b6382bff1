"""Where a model's MLPs are: activation sites, down-projections and transformer layers.

Found from the module tree alone, for any model: actlab's own and the Hugging Face families
(BERT-style encoders, GPT-2, LLaMA/Mistral-style gated MLPs, OPT, ViT). An MLP's site is its
activation module (for a gated MLP ``act(gate)``); its down-projection is the layer that
reads what the MLP feeds back. The model layer (:mod:`actlab.nn.sparse_ffn`) and the probes
use this, so it sits below both; :mod:`actlab.hf` re-exports it with the model loading.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from actlab.surgery import activation_bounds, find_activations

__all__ = ["MLPSite", "down_projection", "is_dense", "mlp_layout", "mlp_sites",
           "transformer_blocks"]

_CONV = (nn.Conv1d, nn.Conv2d, nn.Conv3d)


def is_dense(module: nn.Module) -> bool:
    """``nn.Linear`` or transformers' ``Conv1D`` (a linear layer with a transposed weight)."""
    return isinstance(module, nn.Linear) or (
        type(module).__name__ == "Conv1D" and not isinstance(module, _CONV))


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
        if is_dense(named.get(prefix + sibling, nn.Identity())):
            return prefix + sibling
    grand = parent.rpartition(".")[0]
    bert = f"{grand}.output.dense" if grand else "output.dense"
    if is_dense(named.get(bert, nn.Identity())):
        return bert
    names = list(named)
    for name in names[names.index(site) + 1:]:
        if is_dense(named[name]):
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
                           is_dense(getattr(parent, "gate_proj", None) or nn.Identity())))
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


