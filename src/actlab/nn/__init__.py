"""Model building blocks and small reference models.

Heavier models live in their own modules (``actlab.nn.gpt``, ``actlab.nn.vit`` ...) and are
imported lazily here so that ``import actlab.nn`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "FFN": "actlab.nn.ffn",
    "GatedFFN": "actlab.nn.ffn",
    "gated_ffn": "actlab.nn.ffn",
    "matched_width": "actlab.nn.ffn",
    "ffn_param_count": "actlab.nn.ffn",
    "ffn_flops_per_token": "actlab.nn.ffn",
    "sparse_down": "actlab.nn.sparse_ffn",
    "sparse_inference": "actlab.nn.sparse_ffn",
    "ResidualMLP": "actlab.nn.residual_mlp",
    "OneBlock": "actlab.nn.one_block",
    "RMSNorm": "actlab.nn.norms",
    "PercentileLayerNorm": "actlab.nn.norms",
    "PercentileBatchNorm": "actlab.nn.norms",
    "make_norm": "actlab.nn.norms",
    "GPT": "actlab.nn.gpt",
    "GPTConfig": "actlab.nn.gpt",
    "DiT": "actlab.nn.dit",
    "DiTConfig": "actlab.nn.dit",
    "dit_config": "actlab.nn.dit",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'actlab.nn' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(_LAZY)
