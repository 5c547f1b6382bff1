"""One-shot measurements: probe metrics over one evaluation pass, no training loop.

:func:`measure_once` is one :class:`~actlab.probe.probe.Probe` step over every batch of a
data set under ``torch.no_grad()``, its passes pooled exactly as the probe pools the passes
of a training step. :meth:`Probe.dead_units <actlab.probe.probe.Probe.dead_units>` runs the
same pass (:meth:`Probe._pass_once <actlab.probe.probe.Probe._pass_once>`) with the
dead-unit metrics on the sites of a probe. It stays a method of the probe: this module
builds on ``Probe``, so ``Probe`` cannot call into it without an import cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pandas as pd
from torch import nn

from actlab.errors import renamed_keywords
from actlab.probe.collectors import collectors_for
from actlab.probe.forward import default_forward
from actlab.probe.probe import Probe
from actlab.surgery import Where

__all__ = ["default_forward", "measure_once"]

#: Collector targets that need a backward pass (``measure_once`` runs without gradients).
_BACKWARD_TARGETS = ("grad", "outgrad", "wgrad")


@renamed_keywords(inputs="batches", modules="input_modules")
def measure_once(model: nn.Module, batches: Iterable[Any], *, metrics: Iterable[str],
                 activations: Where | bool = None,
                 blocks: Iterable[nn.Module | str] | None = None,
                 input_modules: Iterable[nn.Module | str] | None = None,
                 eps: float = 1e-7, saturation_tol: float = 0.01,
                 forward: Callable[[Any], Any] | None = None,
                 eval_mode: bool = False) -> pd.DataFrame:
    """Forward-only probe metrics pooled over every batch of ``batches``.

    One :class:`~actlab.probe.probe.Probe` step over all of ``batches`` under
    ``torch.no_grad()``: each batch is run with ``forward(batch)`` (default
    :func:`default_forward`), and the statistics of all passes are pooled exactly as the
    probe pools several passes of a training step. ``activations``, ``blocks``, ``eps`` and
    ``saturation_tol`` are as for ``Probe``; ``input_modules`` are the modules whose input
    the ``input`` metrics read (``down_input_range``), as for ``Probe``. The model's
    train/eval mode is left as it is unless ``eval_mode=True``, which runs in eval mode and
    restores the previous mode.
    Weight-state metrics describe the current weights; backward metrics raise ``ValueError``.

    Returns the tidy frame with columns layer, metric, value. The old keyword names
    ``inputs=`` (the batches) and ``modules=`` still work for one release, with a
    ``DeprecationWarning``.
    """
    chosen = (metrics,) if isinstance(metrics, str) else tuple(metrics)
    backward = [m for c in collectors_for(chosen) if c.target in _BACKWARD_TARGETS
                for m in c.metrics if m in chosen]
    if backward:
        raise ValueError(f"measure_once runs without gradients; metrics {backward} need a "
                         f"backward pass: record them with actlab.Probe during training")
    was_training = model.training
    if eval_mode:
        model.eval()
    # a local measurement: it may run on one rank only, so it never merges across ranks
    probe = Probe(model, every=[0], activations=activations, blocks=blocks, metrics=chosen,
                  eps=eps, saturation_tol=saturation_tol, input_modules=input_modules,
                  distributed=False)
    return probe._pass_once(batches, forward, was_training)

