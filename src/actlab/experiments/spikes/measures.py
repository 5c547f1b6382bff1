"""Where the spikes come from: the measurements of "Bug or Feature²" (long version) App. B.3.1,
Tables 7 and 8, on a trained GPT.

* :func:`input_extremes` (or :func:`recording_input_extremes` around any evaluation pass): per
  block, the largest and smallest value entering the attention (``attn.qkv``) and the
  up-projection (``mlp.up``), pooled over the validation windows. The
  down-projection input is the activation output, which the probe measures already.
* :func:`weight_extremes`: per block and layer type (``qkv``, ``attn_proj``, ``up``,
  ``down``), the standard deviation and the largest and smallest entry of the weight matrix.

Both yield ``(layer, metric, value)`` with ``layer`` the block index as a string, as the probe
rows of the experiment use.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from actlab.nn.gpt import GPT

# layer type -> the Linear's path inside a block (the names of Tables 7 and 8, ours)
WEIGHT_KINDS = {"qkv": "attn.qkv", "attn_proj": "attn.proj", "up": "mlp.up", "down": "mlp.down"}
INPUT_KINDS = {"attn_in": "attn.qkv", "up_in": "mlp.up"}


@contextmanager
def recording_input_extremes(model: GPT) -> Iterator[dict[tuple[str, str], list[float]]]:
    """Within the block, every forward pass of ``model`` updates the returned
    ``{(layer, kind): [min, max]}`` with the inputs of each block's ``attn.qkv`` and
    ``mlp.up`` (so the probe's own evaluation pass can fill it, with no pass of its own)."""
    extremes: dict[tuple[str, str], list[float]] = {}

    def record(key: tuple[str, str]):
        def hook(_module: nn.Module, args: tuple[Tensor, ...]) -> None:
            x = args[0].detach()
            low, high = extremes.setdefault(key, [float("inf"), float("-inf")])
            extremes[key] = [min(low, float(x.min())), max(high, float(x.max()))]
        return hook

    hooks = [block.get_submodule(path).register_forward_pre_hook(record((str(i), kind)))
             for i, block in enumerate(model.blocks) for kind, path in INPUT_KINDS.items()]
    try:
        yield extremes
    finally:
        for hook in hooks:
            hook.remove()


def extreme_rows(extremes: dict[tuple[str, str], list[float]]
                 ) -> Iterator[tuple[str, str, float]]:
    """Rows ``(layer, "<kind>_max" | "<kind>_min", value)`` of a recorded ``extremes``."""
    for (layer, kind), (low, high) in extremes.items():
        yield layer, f"{kind}_max", high
        yield layer, f"{kind}_min", low


def input_extremes(model: GPT, windows: Sequence[Tensor]) -> Iterator[tuple[str, str, float]]:
    """Max and min of the inputs of each block's ``attn.qkv`` and ``mlp.up`` over ``windows``,
    in eval mode without gradients (rows as :func:`extreme_rows`)."""
    was_training = model.training
    try:
        model.eval()
        with recording_input_extremes(model) as extremes, torch.no_grad():
            for window in windows:
                model(window)
    finally:
        model.train(was_training)
    yield from extreme_rows(extremes)


def weight_extremes(model: GPT) -> Iterator[tuple[str, str, float]]:
    """Per block and layer type: ``w_std_<kind>``, ``w_max_<kind>``, ``w_min_<kind>``."""
    for i, block in enumerate(model.blocks):
        for kind, path in WEIGHT_KINDS.items():
            module = block.get_submodule(path)
            if not isinstance(module, nn.Linear):  # a gated FFN names its matrices otherwise
                continue
            w = module.weight.detach().double()
            yield str(i), f"w_std_{kind}", float(w.std())
            yield str(i), f"w_max_{kind}", float(w.max())
            yield str(i), f"w_min_{kind}", float(w.min())
