"""How a probe runs a model on one batch when the caller gives no ``forward``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn


def default_forward(model: nn.Module, batch: Any) -> Any:
    """Run ``model`` on ``batch``: a dict as keywords, a tuple/list by its first element, a
    tensor as it is; tensors are moved to the device of the model's first parameter."""
    param = next(model.parameters(), None)
    device = param.device if param is not None else None

    def move(x: Any) -> Any:
        return x.to(device) if isinstance(x, torch.Tensor) and device is not None else x

    if isinstance(batch, Mapping):
        return model(**{k: move(v) for k, v in batch.items()})
    if isinstance(batch, (list, tuple)):
        return model(move(batch[0]))
    return model(move(batch))
