"""``measure_once``: probe metrics over one evaluation pass through a set of inputs."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pandas as pd
import torch
from torch import nn

from actlab.probe.collectors import collectors_for
from actlab.surgery import Where

#: Collector targets that need a backward pass (``measure_once`` runs without gradients).
_BACKWARD_TARGETS = ("grad", "wgrad")


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


def measure_once(model: nn.Module, inputs: Iterable[Any], *, metrics: Iterable[str],
                 activations: Where | bool = None,
                 blocks: Iterable[nn.Module | str] | None = None,
                 modules: Iterable[nn.Module | str] | None = None,
                 eps: float = 1e-7, saturation_tol: float = 0.01,
                 forward: Callable[[Any], Any] | None = None,
                 eval_mode: bool = False) -> pd.DataFrame:
    """Forward-only probe metrics pooled over every batch of ``inputs``.

    One :class:`~actlab.probe.probe.Probe` step over all of ``inputs`` under
    ``torch.no_grad()``: each batch is run with ``forward(batch)`` (default
    :func:`default_forward`), and the statistics of all passes are pooled exactly as the
    probe pools several passes of a training step. ``activations``, ``blocks``, ``eps`` and
    ``saturation_tol`` are as for ``Probe``; ``modules`` are the modules whose input the
    ``input`` metrics read (``down_input_range``). The model's train/eval mode is left as it
    is unless ``eval_mode=True``, which runs in eval mode and restores the previous mode.
    Weight-state metrics describe the current weights; backward metrics raise ``ValueError``.

    Returns the tidy frame with columns layer, metric, value.
    """
    from actlab.probe.probe import Probe

    chosen = (metrics,) if isinstance(metrics, str) else tuple(metrics)
    backward = [m for c in collectors_for(chosen) if c.target in _BACKWARD_TARGETS
                for m in c.metrics if m in chosen]
    if backward:
        raise ValueError(f"measure_once runs without gradients; metrics {backward} need a "
                         f"backward pass: record them with actlab.Probe during training")
    run = forward if forward is not None else (lambda batch: default_forward(model, batch))
    was_training = model.training
    if eval_mode:
        model.eval()
    probe = Probe(model, every=[0], activations=activations, blocks=blocks, metrics=chosen,
                  eps=eps, saturation_tol=saturation_tol, inputs=modules)
    try:
        with torch.no_grad():
            for batch in inputs:
                run(batch)
        probe.step()
        table = probe.table()
    finally:
        probe.close()
        model.train(was_training)
    return table.drop(columns="step").reset_index(drop=True)
