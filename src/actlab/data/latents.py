"""Precomputed latents (e.g. VAE encodings of an image set) stored as shards in a folder.

Latent diffusion trains on images encoded once by a frozen autoencoder; "Bug or Feature²"
App. D.4 uses the Stable Diffusion 1.5 VAE, whose latents of 256 x 256 images are
``(4, 32, 32)`` and are multiplied by :data:`SD_VAE_SCALE` (0.18215) before training.

Layout: every shard in ``root`` (not in sub-folders) is one of

* ``NAME.safetensors`` holding a float tensor ``latents`` ``(N, C, H, W)`` and an integer
  tensor ``labels`` ``(N,)`` (other tensors are ignored);
* ``NAME.npy`` holding the float ``latents`` ``(N, C, H, W)`` next to ``NAME.labels.npy``
  holding the integer ``labels`` ``(N,)``.

Shards are ordered by file name, and example ``i`` is counted across them in that order.
All shards must share ``(C, H, W)``. Labels (small) are read when the folder is opened;
latents are read only for the rows a batch asks for (``.npy`` memory-mapped,
``.safetensors`` through ``safe_open``). :func:`write_latent_shard` writes either format.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

__all__ = ["SD_VAE_SCALE", "LatentShard", "LatentShards", "write_latent_shard"]

SD_VAE_SCALE = 0.18215
_LABELS_SUFFIX = ".labels.npy"
# Float dtype names as numpy, torch and safetensors (lower-cased) spell them.
_FLOAT_DTYPES = {"float16", "float32", "float64", "bfloat16", "f16", "f32", "f64", "bf16"}


@dataclass(frozen=True)
class LatentShard:
    """One shard: its latents file, its size and per-example shape, its storage format."""

    path: Path
    size: int
    shape: tuple[int, int, int]
    format: str  # "safetensors" or "npy"


def _label_path(latents_path: Path) -> Path:
    return latents_path.with_name(latents_path.name[:-len(".npy")] + _LABELS_SUFFIX)


def _check_arrays(where: str, latent_shape: tuple[int, ...], latent_dtype: str,
                  labels: np.ndarray) -> None:
    if len(latent_shape) != 4:
        raise ValueError(f"{where}: latents must be (N, C, H, W), got shape {latent_shape}")
    if latent_dtype not in _FLOAT_DTYPES:
        raise ValueError(f"{where}: latents must be floating point, got {latent_dtype}")
    if labels.ndim != 1 or len(labels) != latent_shape[0]:
        raise ValueError(f"{where}: labels must be ({latent_shape[0]},) to match the latents, "
                         f"got shape {labels.shape}")
    if not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"{where}: labels must be integers, got {labels.dtype}")
    if len(labels) and labels.min() < 0:
        raise ValueError(f"{where}: labels must be >= 0, found {labels.min()}")


def _open_safetensors(path: Path) -> tuple[LatentShard, np.ndarray]:
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as handle:
            keys = set(handle.keys())
            for key in ("latents", "labels"):
                if key not in keys:
                    raise ValueError(f"{path}: no tensor named {key!r} (found "
                                     f"{', '.join(sorted(keys)) or 'none'})")
            latents = handle.get_slice("latents")
            shape, dtype = tuple(latents.get_shape()), latents.get_dtype().lower()
            labels = handle.get_tensor("labels").numpy()
    except SafetensorError as exc:
        raise ValueError(f"{path}: not a readable safetensors file ({exc})") from None
    _check_arrays(str(path), shape, dtype, labels)
    return LatentShard(path, shape[0], shape[1:], "safetensors"), labels


def _open_npy(path: Path) -> tuple[LatentShard, np.ndarray]:
    label_path = _label_path(path)
    if not label_path.is_file():
        raise FileNotFoundError(f"{path}: labels file {label_path.name} is missing")
    try:
        latents = np.load(path, mmap_mode="r")
        labels = np.load(label_path)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a readable .npy shard ({exc})") from None
    _check_arrays(str(path), latents.shape, latents.dtype.name, labels)
    return LatentShard(path, latents.shape[0], tuple(latents.shape[1:]), "npy"), labels


class LatentShards:
    """The shards of ``root`` as one indexable set of ``(latent, label)`` examples.

    Latents are returned as float32 multiplied by ``scale`` (applied on read; pass
    :data:`SD_VAE_SCALE` for raw Stable Diffusion VAE latents, 1.0 for latents already
    scaled). ``num_classes`` defaults to the largest label + 1; a given value must exceed
    every label. Raises ``FileNotFoundError`` for a missing folder or labels file and
    ``ValueError`` for an empty folder, a malformed shard or shards of different shapes,
    naming the file.
    """

    def __init__(self, root: str | os.PathLike, *, scale: float = 1.0,
                 num_classes: int | None = None) -> None:
        self.root = Path(root).expanduser()
        if not self.root.is_dir():
            raise FileNotFoundError(f"latent folder {self.root} does not exist")
        self.scale = float(scale)
        names = sorted(p for p in self.root.iterdir() if p.is_file()
                       and not p.name.startswith("."))
        shards, labels = [], []
        for path in names:
            if path.suffix == ".safetensors":
                shard, shard_labels = _open_safetensors(path)
            elif path.suffix == ".npy" and not path.name.endswith(_LABELS_SUFFIX):
                shard, shard_labels = _open_npy(path)
            elif path.name.endswith(_LABELS_SUFFIX):
                latents_path = path.with_name(path.name[:-len(_LABELS_SUFFIX)] + ".npy")
                if not latents_path.is_file():
                    raise FileNotFoundError(f"{path}: its latents file {latents_path.name} "
                                            f"is missing")
                continue
            else:
                continue
            if shards and shard.shape != shards[0].shape:
                raise ValueError(f"{path}: latents of shape {shard.shape} per example, but "
                                 f"{shards[0].path.name} has {shards[0].shape}")
            shards.append(shard)
            labels.append(shard_labels.astype(np.int64))
        if not shards:
            raise ValueError(f"latent folder {self.root} holds no shards (*.safetensors, or "
                             f"*.npy with *{_LABELS_SUFFIX})")
        self.shards: tuple[LatentShard, ...] = tuple(shards)
        self.labels = torch.from_numpy(np.concatenate(labels))
        if len(self.labels) == 0:
            raise ValueError(f"latent folder {self.root}: every shard is empty")
        self.offsets = np.cumsum([0] + [s.size for s in shards])
        top = int(self.labels.max()) + 1
        if num_classes is not None and num_classes < top:
            raise ValueError(f"num_classes={num_classes}, but the shards hold label {top - 1}")
        self.num_classes = top if num_classes is None else int(num_classes)
        self._mmaps: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return int(self.offsets[-1])

    @property
    def latent_shape(self) -> tuple[int, int, int]:
        """``(C, H, W)`` of one latent."""
        return self.shards[0].shape

    def _rows(self, shard_id: int, rows: np.ndarray) -> np.ndarray:
        shard = self.shards[shard_id]
        if shard.format == "npy":
            if shard_id not in self._mmaps:
                self._mmaps[shard_id] = np.load(shard.path, mmap_mode="r")
            return np.asarray(self._mmaps[shard_id][rows], dtype=np.float32)
        from safetensors import safe_open

        with safe_open(str(shard.path), framework="pt") as handle:
            latents = handle.get_slice("latents")
            return torch.cat([latents[int(r):int(r) + 1] for r in rows]).float().numpy()

    def get(self, indices: Tensor | np.ndarray | list[int]) -> tuple[Tensor, Tensor]:
        """Latents (float32, times ``scale``) and labels of the examples ``indices``, in order."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if len(idx) and (idx.min() < 0 or idx.max() >= len(self)):
            raise IndexError(f"indices must be in [0, {len(self)}), got {idx.min()}..{idx.max()}")
        out = np.empty((len(idx), *self.latent_shape), dtype=np.float32)
        shard_of = np.searchsorted(self.offsets, idx, side="right") - 1
        for shard_id in np.unique(shard_of):
            where = np.flatnonzero(shard_of == shard_id)
            rows = idx[where] - self.offsets[shard_id]
            order = np.argsort(rows, kind="stable")  # ascending rows read a memory map in order
            out[where[order]] = self._rows(int(shard_id), rows[order])
        latents = torch.from_numpy(out)
        if self.scale != 1.0:
            latents.mul_(self.scale)
        return latents, self.labels[torch.from_numpy(idx)]

    def batch(self, step: int, batch_size: int, generator_seed: int = 0) -> tuple[Tensor, Tensor]:
        """Minibatch ``step``: ``batch_size`` distinct random examples, ``(latents, labels)``.

        The indices come from numpy's PCG64 seeded with ``(generator_seed, step)``, so a
        batch depends only on those two numbers: the same seed gives the same batches in any
        order of steps (a resumed run continues the same sequence).
        """
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        if not 1 <= batch_size <= len(self):
            raise ValueError(f"batch_size must be in [1, {len(self)}], got {batch_size}")
        rng = np.random.default_rng([generator_seed, step])
        return self.get(rng.choice(len(self), size=batch_size, replace=False))

    def batches(self, batch_size: int, generator_seed: int = 0,
                start: int = 0) -> Iterator[tuple[Tensor, Tensor]]:
        """``batch(step, batch_size, generator_seed)`` for ``step = start, start + 1, ...``."""
        step = start
        while True:
            yield self.batch(step, batch_size, generator_seed)
            step += 1

    def __repr__(self) -> str:
        return (f"LatentShards({str(self.root)!r}, shards={len(self.shards)}, n={len(self)}, "
                f"shape={self.latent_shape}, classes={self.num_classes}, scale={self.scale})")


def write_latent_shard(path: str | os.PathLike, latents: Tensor | np.ndarray,
                       labels: Tensor | np.ndarray) -> list[Path]:
    """Write one shard; the format follows ``path``'s suffix. Returns the files written.

    ``NAME.safetensors``: one file with ``latents`` and ``labels``. ``NAME.npy``: the latents
    there and the labels in ``NAME.labels.npy``. Latents keep their float dtype (bfloat16
    only in safetensors), labels are stored as int64.
    """
    path = Path(path)
    lat = latents.detach().cpu() if isinstance(latents, Tensor) else torch.from_numpy(
        np.ascontiguousarray(latents))
    lab = torch.as_tensor(np.asarray(labels.cpu() if isinstance(labels, Tensor) else labels))
    _check_arrays(str(path), tuple(lat.shape), str(lat.dtype).removeprefix("torch."),
                  lab.numpy())
    lab = lab.to(torch.int64).contiguous()
    if path.suffix == ".safetensors":
        from safetensors.torch import save_file

        save_file({"latents": lat.contiguous(), "labels": lab}, str(path))
        return [path]
    if path.suffix != ".npy" or path.name.endswith(_LABELS_SUFFIX):
        raise ValueError(f"{path}: a shard is NAME.safetensors or NAME.npy (not "
                         f"*{_LABELS_SUFFIX})")
    if lat.dtype == torch.bfloat16:
        raise ValueError(f"{path}: numpy cannot store bfloat16 latents; use .safetensors")
    np.save(path, lat.numpy())
    np.save(_label_path(path), lab.numpy())
    return [path, _label_path(path)]
