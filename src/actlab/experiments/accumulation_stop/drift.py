"""Weight drift under Accumulation Stop ("Bug or Feature²" App. B.1.4, Fig. 12).

The drift the paper tracks is the mean of a weight matrix that reads an activation's output
(its App. C.2: the layer whose input is post-activation). :func:`post_activation_linears`
finds those layers in any model by watching one forward pass: a ``Linear`` called directly
after an activation module (no other activation, norm or linear in between) reads its
output (ours: the MLP's blocks 2..6 and head, a ViT block's second MLP projection).
:func:`mean_weight` averages their weight means, so the drift of a run is its change over
training. :func:`norm_statistics` says where the pre-activations sit against the norm that
centres them: the mean of each norm layer's input and the share of its output below zero (the
MLP's norm comes directly before the ReLU, so that share is its sparsity). A frozen centre
cannot follow the pre-activations as they drift down, a dynamic one re-centres every step.
"""

from __future__ import annotations

from copy import deepcopy

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


@torch.no_grad()
def norm_statistics(model: nn.Module, x: Tensor) -> tuple[float, float]:
    """``(input mean, output share below zero)`` of the norm layers of ``model`` on ``x``, each
    averaged over the layers (``nan`` without norms). A copy runs on the run's device in eval
    mode, so running and frozen statistics are used and neither they nor a counter move."""
    means: list[float] = []
    negative: list[float] = []

    def record(_module: nn.Module, inputs: tuple[Tensor, ...], output: Tensor) -> None:
        means.append(float(inputs[0].float().mean()))
        negative.append(float((output < 0).float().mean()))

    from actlab.device import place, to_unit_device

    copy = place(deepcopy(model)).eval()  # on the run's device (the CPU outside a run)
    for module in copy.modules():
        if is_norm(module) and not list(module.children()):
            module.register_forward_hook(record)
    copy(to_unit_device(x))
    if not means:
        return float("nan"), float("nan")
    return sum(means) / len(means), sum(negative) / len(negative)
