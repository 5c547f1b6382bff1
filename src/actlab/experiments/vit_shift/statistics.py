"""What ``vit-shift`` records while a ViT trains, for its in-memory and streamed paths
alike: the probe's per-block statistics on a batch of images, and the per-step logger."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

import torch

from actlab.device import to_model_device
from actlab.train.distributed import DistInfo, rank_slice


@torch.no_grad()
def stream_statistics(model: Any, x: torch.Tensor,
                      dist: DistInfo | None = None) -> dict[tuple[str, str], float]:
    """``{(layer, metric): value}``: each block's ``hidden_mean`` and each activation's
    ``act_mean`` over the images ``x``, measured by :class:`actlab.Probe` in eval mode (a
    data-parallel rank measures its part of ``x``; the probe merges the ranks')."""
    from actlab.probe.probe import Probe

    if dist is not None:
        x = x[rank_slice(len(x), dist)]

    was_training = model.training
    model.eval()
    probe = Probe(model, every=[0], blocks=list(model.blocks), weights=False,
                  metrics=["hidden_mean", "act_mean"])
    try:
        model(to_model_device(model, x))
        probe.step()
        table = probe.table()
    finally:
        probe.close()
        model.train(was_training)
    return {(_short(row.layer), row.metric): float(row.value) for row in table.itertuples()}


def _short(layer: str) -> str:
    """``blocks.3`` -> ``block3``, ``blocks.3.mlp.act`` -> ``act3``."""
    parts = layer.split(".")
    if len(parts) >= 2 and parts[0] == "blocks" and parts[1].isdigit():
        return f"block{parts[1]}" if len(parts) == 2 else f"act{parts[1]}"
    return layer


def step_logger(result: Any, run: str, seed: int, steps: int, loss_every: int,
                checkpoints: Collection[int], checkpoint: Callable[[int], None]
                ) -> Callable[[int, float], None]:
    """The trainer's ``on_step``: the batch loss every ``loss_every`` steps and at the last,
    and ``checkpoint(updates)`` at the ``checkpoints`` (counted in updates done)."""
    def on_step(step: int, value: float) -> None:
        updates = step + 1
        if step % loss_every == 0 or updates == steps:
            result.add(run, seed, updates, "", "batch_loss", value)
        if updates in checkpoints:
            checkpoint(updates)
    return on_step
