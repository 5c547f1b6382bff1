"""Trainer checkpoints: one safetensors file with the model, the optimizer state and the RNG.

:func:`save_checkpoint` writes ``model.<name>``, ``optim.<i>.<key>``, ``rng.cpu`` and
``extra.<key>`` tensors, with the step, the optimizer's param groups and scalars and any
JSON ``extra`` in the file's metadata, atomically (a temporary file, then a rename);
:func:`load_checkpoint` reads it back. :class:`~actlab.train.loop.Trainer` keeps its
``last.safetensors`` (:data:`CHECKPOINT_NAME`) with them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

__all__ = ["CHECKPOINT_NAME", "load_checkpoint", "save_checkpoint"]

CHECKPOINT_NAME = "last.safetensors"


def save_checkpoint(path: str | os.PathLike, model: nn.Module,
                    optimizer: torch.optim.Optimizer | None = None, step: int = 0,
                    extra: dict[str, Any] | None = None,
                    extra_tensors: dict[str, Tensor] | None = None) -> None:
    """Save model and optimizer tensors to a safetensors file; the rest goes in its metadata.

    Keys: ``model.<name>`` (tied weights are stored once per name), ``optim.<i>.<key>``
    for tensor optimizer state, ``rng.cpu`` for the CPU generator state and
    ``extra.<key>`` for ``extra_tensors`` (e.g. callback tensors).
    """
    from safetensors.torch import save_file

    tensors: dict[str, Tensor] = {}
    for name, value in model.state_dict().items():
        tensors[f"model.{name}"] = value.detach().cpu().contiguous().clone()
    scalars: dict[str, dict[str, Any]] = {}
    groups: list[dict[str, Any]] = []
    if optimizer is not None:
        state = optimizer.state_dict()
        for index, entries in state["state"].items():
            for key, value in entries.items():
                if isinstance(value, Tensor):
                    tensors[f"optim.{index}.{key}"] = value.detach().cpu().contiguous().clone()
                else:
                    scalars.setdefault(str(index), {})[key] = value
        groups = state["param_groups"]
    for key, value in (extra_tensors or {}).items():
        tensors[f"extra.{key}"] = value.detach().cpu().contiguous().clone()
    tensors["rng.cpu"] = torch.get_rng_state()
    metadata = {"format": "actlab-trainer-1", "step": str(int(step)),
                "param_groups": json.dumps(groups), "optim_scalars": json.dumps(scalars),
                "extra": json.dumps(extra or {})}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    save_file(tensors, str(tmp), metadata=metadata)
    os.replace(tmp, path)


def load_checkpoint(path: str | os.PathLike, model: nn.Module,
                    optimizer: torch.optim.Optimizer | None = None,
                    device: torch.device | str = "cpu") -> dict[str, Any]:
    """Load a file written by :func:`save_checkpoint` into ``model`` (and ``optimizer``).

    Returns the metadata and the extra tensors: ``{"step": int, "extra": dict,
    "tensors": dict}`` (``tensors`` holds the ``extra_tensors`` of :func:`save_checkpoint`).
    """
    from safetensors import safe_open
    from safetensors.torch import load_file

    tensors = load_file(str(path))
    with safe_open(str(path), framework="pt") as handle:
        metadata = handle.metadata() or {}
    if metadata.get("format") != "actlab-trainer-1":
        raise ValueError(f"{path} is not an actlab trainer checkpoint")
    model_state = {k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")}
    model.load_state_dict(model_state)
    if optimizer is not None:
        state: dict[int, dict[str, Any]] = {}
        for key, value in tensors.items():
            if key.startswith("optim."):
                _, index, name = key.split(".", 2)
                # AdamW keeps its step count on the CPU; moments live with the parameters
                state.setdefault(int(index), {})[name] = value if name == "step" else value.to(device)
        for index, entries in json.loads(metadata["optim_scalars"]).items():
            state.setdefault(int(index), {}).update(entries)
        optimizer.load_state_dict({"state": state,
                                   "param_groups": json.loads(metadata["param_groups"])})
    if "rng.cpu" in tensors:
        torch.set_rng_state(tensors["rng.cpu"])
    extra_tensors = {k[len("extra."):]: v for k, v in tensors.items() if k.startswith("extra.")}
    return {"step": int(metadata["step"]), "extra": json.loads(metadata.get("extra", "{}")),
            "tensors": extra_tensors}
