"""Token shards as nanoGPT and modded-nanogpt write them: ``uint16`` token ids in ``.bin`` files.

A shard is either raw (nanoGPT's ``train.bin`` / ``val.bin``: only the little-endian ``uint16``
ids) or headed (the FineWeb shards of modded-nanogpt, ``fineweb_train_000001.bin``): 256
little-endian ``int32`` -- the magic number 20240520, the version 1 and the token count, the
rest zero -- then the ids. :func:`read_shard` tells them apart: a file whose first ``int32``
is the magic number, or whose third equals its size in tokens after a header, is headed (and
checked: magic, version, count); any other file is raw.

``data="shards:DIR"`` (:func:`shard_corpus`): the ``.bin`` files of ``DIR`` whose names
contain ``val`` form the validation split, the others containing ``train`` the training
split, each in name order, read as memory maps (several shards of a split are joined end to
end, as one stream). Every id is checked below the model's vocabulary (one pass over the
files when the corpus loads). :func:`write_shards` writes byte-level shards of any text
(``tools/write_shards.py``): no BPE tokenizer is available offline.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

MAGIC = 20240520
VERSION = 1
HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4
TOKEN_DTYPE = np.dtype("<u2")
SHARDS_PREFIX = "shards:"
_CHUNK = 1 << 24  # tokens per pass of the vocabulary check


class ShardError(ValueError):
    """A shard file that cannot be read as one (the message names the file and the problem)."""


def read_shard(path: str | os.PathLike) -> np.ndarray:
    """The token ids of one shard, a read-only ``uint16`` memory map (module docstring)."""
    path = Path(path)
    size = path.stat().st_size
    header = np.fromfile(path, dtype="<i4", count=HEADER_INTS) if size >= HEADER_BYTES else None
    headed = header is not None and (
        int(header[0]) == MAGIC or int(header[2]) * TOKEN_DTYPE.itemsize == size - HEADER_BYTES)
    if headed:
        if int(header[0]) != MAGIC:
            raise ShardError(f"{path}: wrong magic number {int(header[0])} (a headed shard "
                             f"starts with {MAGIC})")
        if int(header[1]) != VERSION:
            raise ShardError(f"{path}: unsupported shard version {int(header[1])} (expected "
                             f"{VERSION})")
        count = int(header[2])
        found = (size - HEADER_BYTES) / TOKEN_DTYPE.itemsize
        if count != found:
            raise ShardError(f"{path}: the header counts {count} tokens, the file holds {found:g}")
        offset = HEADER_BYTES
    else:
        if size % TOKEN_DTYPE.itemsize:
            raise ShardError(f"{path}: {size} bytes is not a whole number of uint16 tokens")
        count, offset = size // TOKEN_DTYPE.itemsize, 0
    if count == 0:
        raise ShardError(f"{path}: holds no tokens")
    return np.memmap(path, dtype=TOKEN_DTYPE, mode="r", offset=offset, shape=(count,))


def check_vocab(tokens: np.ndarray, vocab_size: int, where: str) -> None:
    """:class:`ShardError` when an id of ``tokens`` is ``>= vocab_size``."""
    for start in range(0, len(tokens), _CHUNK):
        chunk = np.asarray(tokens[start:start + _CHUNK])
        top = int(chunk.max())
        if top >= vocab_size:
            position = start + int(np.argmax(chunk >= vocab_size))
            raise ShardError(f"{where}: token id {int(chunk[position - start])} at position "
                             f"{position} is >= the vocabulary size {vocab_size}")


class TokenStream:
    """Shards of one split joined end to end: ``len()`` and integer-array indexing, as
    :func:`~actlab.data.text.sample_batch` reads a 1-d array."""

    def __init__(self, parts: Sequence[np.ndarray]) -> None:
        if not parts:
            raise ValueError("TokenStream needs at least one shard")
        self.parts = list(parts)
        self.starts = np.cumsum([0] + [len(p) for p in self.parts])
        self.dtype = TOKEN_DTYPE

    def __len__(self) -> int:
        return int(self.starts[-1])

    def __getitem__(self, index: np.ndarray) -> np.ndarray:
        index = np.asarray(index)
        if len(self.parts) == 1:
            return np.asarray(self.parts[0][index])
        flat = index.reshape(-1)
        if flat.size and (flat.min() < 0 or flat.max() >= len(self)):
            raise IndexError(f"token index out of range 0..{len(self) - 1}")
        shard = np.searchsorted(self.starts, flat, side="right") - 1
        out = np.empty(flat.shape, dtype=TOKEN_DTYPE)
        for which in np.unique(shard):
            mask = shard == which
            out[mask] = self.parts[which][flat[mask] - self.starts[which]]
        return out.reshape(index.shape)


def split_files(folder: str | os.PathLike) -> dict[str, list[Path]]:
    """``{"train": [...], "val": [...]}``: the shards of ``folder`` by name (module docstring)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"no such shard folder: {folder}")
    files = sorted(p for p in folder.iterdir() if p.suffix == ".bin" and p.is_file())
    val = [p for p in files if "val" in p.name]
    train = [p for p in files if "train" in p.name and p not in val]
    if not train or not val:
        raise ShardError(f"{folder}: needs .bin shards named *train* and *val*, found "
                         f"{[p.name for p in files] or 'none'}")
    return {"train": train, "val": val}


def shard_splits(folder: str | os.PathLike, vocab_size: int | None = None
                 ) -> tuple[TokenStream, TokenStream, int]:
    """``(train, val, number of files)`` of the shards in ``folder``, ids checked below
    ``vocab_size`` when given."""
    streams = {}
    files = split_files(folder)
    for split, paths in files.items():
        parts = [read_shard(p) for p in paths]
        if vocab_size is not None:
            for path, part in zip(paths, parts):
                check_vocab(part, vocab_size, str(path))
        streams[split] = TokenStream(parts)
    return streams["train"], streams["val"], sum(len(p) for p in files.values())


def write_shard(path: str | os.PathLike, tokens: np.ndarray, header: bool = True) -> Path:
    """Write ``tokens`` (ids below 65,536) as one shard, headed or raw; returns the path."""
    tokens = np.asarray(tokens)
    if tokens.size and (tokens.min() < 0 or tokens.max() > np.iinfo(TOKEN_DTYPE).max):
        raise ValueError("token ids must be in [0, 65535] for uint16 shards")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as handle:
        if header:
            head = np.zeros(HEADER_INTS, dtype="<i4")
            head[:3] = (MAGIC, VERSION, tokens.size)
            handle.write(head.tobytes())
        handle.write(tokens.astype(TOKEN_DTYPE).tobytes())
    os.replace(tmp, path)
    return path


def write_shards(folder: str | os.PathLike, splits: dict[str, np.ndarray], *,
                 prefix: str = "bytes", tokens_per_shard: int = 100_000_000,
                 header: bool = True) -> list[Path]:
    """Write each split (``"train"``, ``"val"``: 1-d id arrays) as ``<prefix>_<split>_<n>.bin``
    shards of at most ``tokens_per_shard`` ids (raw ``<split>.bin`` files, one per split,
    with ``header=False``, as nanoGPT names them)."""
    if tokens_per_shard < 1:
        raise ValueError(f"tokens_per_shard must be >= 1, got {tokens_per_shard}")
    written = []
    for split, tokens in splits.items():
        if not header:
            written.append(write_shard(Path(folder) / f"{split}.bin", tokens, header=False))
            continue
        for n, start in enumerate(range(0, max(1, len(tokens)), tokens_per_shard)):
            written.append(write_shard(Path(folder) / f"{prefix}_{split}_{n:06d}.bin",
                                       tokens[start:start + tokens_per_shard]))
    return written
