"""The negative share of pre-activations as "Bug or Feature²" App. D.1 defines it.

D.1: "Negative percentage: fraction of pre-activation values (linear layer outputs) that are
negative". Where a norm sits between the linear layer and the activation (the MLP with
LayerNorm or RMSNorm, the ResNet's BatchNorm) the activation's input is the norm's output,
which a centring norm moves to about half negative whatever the weights do; the paper counts
the linear layer's output. :func:`linear_neg_frac` does: it watches one pass and, for each
activation, takes the ``Linear`` or ``Conv2d`` called last before it with only norms called
in between (ours: where a residual sum mixes two weight layers, as in a ResNet block with a
projection shortcut, the later one, the shortcut); the share of negative outputs of those
layers, pooled over ``x`` and averaged over them.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from actlab.device import to_model_device
from actlab.nn.norms import is_norm

WEIGHT_LAYERS = (nn.Linear, nn.Conv2d)


def pre_activation_layers(model: nn.Module, x: Tensor) -> list[nn.Module]:
    """The weight layers whose outputs are the activations' pre-activations (module doc), in
    call order, from one storage-free pass (:func:`actlab.surgery.call_order`)."""
    from actlab.surgery import call_order

    calls = call_order(model, x, lambda m: isinstance(m, WEIGHT_LAYERS) or is_norm(m))
    found: list[nn.Module] = []
    last: nn.Module | None = None  # the weight layer since which only norms were called
    for module, is_activation in calls:
        if isinstance(module, WEIGHT_LAYERS):
            last = module
        elif is_activation:
            if last is not None and last not in found:
                found.append(last)
            last = None
    return found


@torch.no_grad()
def linear_neg_frac(model: nn.Module, x: Tensor, batch_size: int = 512) -> float:
    """The mean over :func:`pre_activation_layers` of the share of negative outputs on ``x``
    (eval mode; the model's mode is restored); ``nan`` without such layers."""
    layers = pre_activation_layers(model, x[:2])
    if not layers:
        return float("nan")
    negative = [0] * len(layers)
    total = [0] * len(layers)

    def count(i: int):
        def hook(mod: nn.Module, args: tuple, out: Tensor) -> None:
            negative[i] += int((out < 0).sum())
            total[i] += out.numel()
        return hook

    hooks = [layer.register_forward_hook(count(i)) for i, layer in enumerate(layers)]
    was_training = model.training
    model.eval()
    try:
        for start in range(0, len(x), batch_size):
            # the trained model may sit on an accelerator
            model(to_model_device(model, x[start:start + batch_size]))
    finally:
        model.train(was_training)
        for h in hooks:
            h.remove()
    return float(sum(n / t for n, t in zip(negative, total)) / len(layers))
