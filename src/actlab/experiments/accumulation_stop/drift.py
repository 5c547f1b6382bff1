"""Weight drift under Accumulation Stop ("Bug or Feature²" App. B.1.4, Fig. 12).

The drift the paper tracks is the mean of a weight matrix that reads an activation's output
(its App. C.2: the layer whose input is post-activation). :func:`post_activation_linears`
finds those layers in any model by watching one forward pass: a ``Linear`` called directly
after an activation module (no other activation, norm or linear in between) reads its
output (ours: the MLP's blocks 2..6 and head, a ViT block's second MLP projection).
:func:`mean_weight` averages their weight means, so the drift of a run is its change over
training.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from actlab.nn.norms import is_norm


def post_activation_linears(model: nn.Module, x: Tensor) -> list[nn.Linear]:
    """The ``nn.Linear`` layers of ``model`` that read an activation's output on input ``x``:
    those called directly after an activation, with no norm or other linear in between (the
    call order of one storage-free pass, :func:`actlab.surgery.call_order`)."""
    from actlab.surgery import call_order

    calls = call_order(model, x, lambda m: isinstance(m, nn.Linear) or is_norm(m))
    found: list[nn.Linear] = []
    for (_, before_is_act), (after, _) in zip(calls, calls[1:]):
        if before_is_act and isinstance(after, nn.Linear) and after not in found:
            found.append(after)
    return found


@torch.no_grad()
def mean_weight(layers: list[nn.Linear]) -> float:
    """The mean over ``layers`` of each weight matrix's mean (``nan`` without layers)."""
    if not layers:
        return float("nan")
    return float(torch.stack([layer.weight.float().mean() for layer in layers]).mean())
