"""How a probe runs a model on one batch when the caller gives no ``forward``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from actlab.train.placement import model_device


def move_batch(batch: Any, device: torch.device) -> Any:
    """``batch`` with its tensors on ``device``: a tensor, or a dict/tuple/list of them."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, Mapping):
        return {k: move_batch(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(move_batch(v, device) for v in batch)
    return batch


def default_forward(model: nn.Module, batch: Any) -> Any:
    """Run ``model`` on ``batch``: a dict as keywords, a tuple/list by its first element, a
    tensor as it is; tensors are moved to the model's device first."""
    batch = move_batch(batch, model_device(model))
    if isinstance(batch, Mapping):
        return model(**batch)
    if isinstance(batch, (list, tuple)):
        return model(batch[0])
    return model(batch)
