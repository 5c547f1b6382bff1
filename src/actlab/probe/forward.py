"""How a probe runs a model on one batch when the caller gives no ``forward``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn

from actlab.device import model_device, move_batch


def default_forward(model: nn.Module, batch: Any) -> Any:
    """Run ``model`` on ``batch``: a dict as keywords, a tuple/list by its first element, a
    tensor as it is; tensors are moved to the model's device first."""
    batch = move_batch(batch, model_device(model))
    if isinstance(batch, Mapping):
        return model(**batch)
    if isinstance(batch, (list, tuple)):
        return model(batch[0])
    return model(batch)
