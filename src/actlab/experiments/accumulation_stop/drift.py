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


@torch.no_grad()
def post_activation_linears(model: nn.Module, x: Tensor) -> list[nn.Linear]:
    """The ``nn.Linear`` layers of ``model`` that read an activation's output on input ``x``.

    The forward pass runs on a copy in eval mode, so that no statistic of ``model`` (a norm's
    running values or its count of computed statistics) changes.
    """
    import copy

    from actlab.surgery import find_activations

    original = dict(model.named_modules())
    model = copy.deepcopy(model)
    names = {id(m): name for name, m in model.named_modules()}
    acts = {id(m) for m in find_activations(model).values()}
    calls: list[nn.Module] = []
    watched = [m for m in model.modules()
               if id(m) in acts or isinstance(m, nn.Linear) or _is_norm(m)]
    hooks = [m.register_forward_pre_hook(lambda mod, args: calls.append(mod)) for m in watched]
    model.eval()
    model(x)
    for h in hooks:
        h.remove()
    found: list[nn.Linear] = []
    for before, after in zip(calls, calls[1:]):
        if id(before) in acts and isinstance(after, nn.Linear):
            layer = original[names[id(after)]]
            if layer not in found:
                found.append(layer)
    return found


def _is_norm(module: nn.Module) -> bool:
    """Whether ``module`` is a norm (its class name says so: ours and PyTorch's)."""
    return "norm" in type(module).__name__.lower()


@torch.no_grad()
def mean_weight(layers: list[nn.Linear]) -> float:
    """The mean over ``layers`` of each weight matrix's mean (``nan`` without layers)."""
    if not layers:
        return float("nan")
    return float(torch.stack([layer.weight.float().mean() for layer in layers]).mean())
