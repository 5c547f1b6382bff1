"""Byte-level text corpora available offline: Python's own standard library, or your files.

Every Python installation ships the ``.py`` sources of its standard library, so
:func:`stdlib_corpus` always has ~10 MB of real text to model without a download. Tokens are
bytes (vocabulary 256). The train/validation split is by file and deterministic: a file goes
to validation when the CRC-32 of its relative path, modulo 1000, is below
``1000 * val_fraction`` (so the split of a file never depends on which other files exist).
A corpus with fewer than two files, or whose hash split leaves one side empty, is split by
position instead (the last ``val_fraction`` of the bytes). Both splits are cached as uint8
``.npy`` files under the cache folder (``$ACTLAB_CACHE``, default ``~/.cache/actlab``), keyed
by a hash of the file list, sizes and modification times; writes are atomic.

``load_corpus("shards:DIR")`` reads uint16 token shards instead (:mod:`actlab.data.shards`).
:func:`sample_batch` draws next-token training windows with a ``torch.Generator``;
:func:`docstrings` gives a fixed, sorted set of module docstrings (a text set for probing
pretrained models).
"""

from __future__ import annotations

import ast
import fnmatch
import hashlib
import os
import sys
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "BYTE_VOCAB",
    "TextCorpus",
    "cache_dir",
    "docstrings",
    "load_corpus",
    "sample_batch",
    "stdlib_corpus",
    "stdlib_files",
    "text_corpus",
]

_SKIP_DIRS = {"site-packages", "dist-packages", "__pycache__"}
_SEPARATOR = b"\n\n"  # between files, so no window silently glues two files mid-line
BYTE_VOCAB = 256


@dataclass
class TextCorpus:
    """A token corpus: ``train`` and ``val`` are 1-d arrays (possibly memory-mapped) of bytes
    (uint8), or of shard token ids (uint16, a :class:`~actlab.data.shards.TokenStream`)."""

    train: Any
    val: Any
    name: str
    n_files: int

    vocab_size: int = BYTE_VOCAB

    def split(self, name: str) -> np.ndarray:
        """The ``"train"`` or ``"val"`` array."""
        if name not in ("train", "val"):
            raise ValueError(f"split must be 'train' or 'val', got {name!r}")
        return self.train if name == "train" else self.val

    def __repr__(self) -> str:
        unit = "bytes" if self.vocab_size == BYTE_VOCAB and self.train.dtype == np.uint8 \
            else "tokens"
        return (f"TextCorpus({self.name!r}, files={self.n_files}, train={len(self.train):,} "
                f"{unit}, val={len(self.val):,} {unit})")


def cache_dir(path: str | os.PathLike | None = None) -> Path:
    """The cache folder: ``path``, else ``$ACTLAB_CACHE``, else ``~/.cache/actlab``."""
    if path is not None:
        return Path(path)
    env = os.environ.get("ACTLAB_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "actlab"


def stdlib_root() -> Path:
    """Folder of the running Python's standard library sources (where ``os.py`` lives)."""
    return Path(os.path.dirname(os.__file__))


def stdlib_files(include_tests: bool = False) -> list[Path]:
    """The standard library's ``.py`` files, sorted by relative path.

    Installed third-party packages (``site-packages``) are never included; the test suites
    (``test``, ``tests``, ``idlelib/idle_test`` ...) only with ``include_tests``.
    """
    root = stdlib_root()
    skip = set(_SKIP_DIRS)
    if not include_tests:
        skip |= {"test", "tests", "idle_test"}
    return _walk(root, "*.py", skip)


def _walk(root: Path, pattern: str, skip: set[str]) -> list[Path]:
    # os.walk prunes skipped folders (site-packages can be far larger than the stdlib)
    found = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in skip and not d.startswith(".")]
        found += [Path(folder, n) for n in names
                  if fnmatch.fnmatch(n, pattern) and not n.startswith(".")]
    return sorted((p for p in found if p.is_file()), key=lambda p: p.relative_to(root).as_posix())


def stdlib_corpus(cache: str | os.PathLike | None = None, val_fraction: float = 0.1,
                  include_tests: bool = False) -> TextCorpus:
    """The standard library's own sources as a byte corpus (built once, then cached)."""
    version = f"py{sys.version_info.major}{sys.version_info.minor}"
    return _cached_corpus(f"stdlib-{version}", stdlib_root(), stdlib_files(include_tests),
                          val_fraction, cache)


def text_corpus(path: str | os.PathLike, cache: str | os.PathLike | None = None,
                val_fraction: float = 0.1, pattern: str = "*") -> TextCorpus:
    """A byte corpus from a text file, or from every file matching ``pattern`` in a folder
    (recursively, hidden files and ``__pycache__`` skipped)."""
    path = Path(path)
    if path.is_file():
        return _cached_corpus(f"file-{path.stem}", path.parent, [path], val_fraction, cache)
    if not path.is_dir():
        raise FileNotFoundError(f"no such text file or folder: {path}")
    files = _walk(path, pattern, {"__pycache__"})
    if not files:
        raise ValueError(f"no files matching {pattern!r} under {path}")
    return _cached_corpus(f"dir-{path.name or 'root'}", path, files, val_fraction, cache)


def is_shards(source: str) -> bool:
    """Whether a corpus source names token shards (``"shards:DIR"``)."""
    return source.startswith("shards:")


def check_corpus_source(source: str) -> None:
    """Refuse a corpus source that cannot load, before any training starts: a missing path,
    an empty file, a folder without files, a shard folder without train and val shards
    (``FileNotFoundError`` / ``ValueError`` naming the path). Cheap: nothing is read."""
    if source == "stdlib":
        return
    if is_shards(source):
        from actlab.data.shards import split_files

        split_files(source[len("shards:"):])
        return
    path = Path(source).expanduser()
    if path.is_file():
        if path.stat().st_size == 0:
            raise ValueError(f"text file {path} is empty")
        return
    if not path.is_dir():
        raise FileNotFoundError(f"no such text file or folder: {path}")
    if not any(p.stat().st_size for p in _walk(path, "*", {"__pycache__"})):
        raise ValueError(f"no non-empty files under {path}")


def load_corpus(source: str, cache: str | os.PathLike | None = None,
                val_fraction: float = 0.1, vocab_size: int | None = None) -> TextCorpus:
    """``"stdlib"`` for the standard library, ``"shards:DIR"`` for token shards (their own
    train/val split; ids checked below ``vocab_size``), else a path to a text file or folder
    (bytes: ``vocab_size``, when given, must be at least 256)."""
    if is_shards(source):
        from actlab.data.shards import shard_splits

        folder = source[len("shards:"):]
        train, val, n_files = shard_splits(folder, vocab_size)
        return TextCorpus(train, val, f"shards-{Path(folder).name}", n_files,
                          vocab_size or 1 << 16)
    if vocab_size is not None and vocab_size < BYTE_VOCAB:
        raise ValueError(f"byte-level text needs a vocabulary of >= {BYTE_VOCAB}, got {vocab_size}")
    if source == "stdlib":
        return stdlib_corpus(cache, val_fraction)
    return text_corpus(source, cache, val_fraction)


def _check_fraction(val_fraction: float) -> None:
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")


def _fingerprint(root: Path, files: Sequence[Path], val_fraction: float) -> str:
    digest = hashlib.sha256(f"v1|{val_fraction!r}".encode())
    for path in files:
        stat = path.stat()
        digest.update(f"|{path.relative_to(root).as_posix()}|{stat.st_size}|{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


def _cached_corpus(name: str, root: Path, files: Sequence[Path], val_fraction: float,
                   cache: str | os.PathLike | None) -> TextCorpus:
    _check_fraction(val_fraction)
    folder = cache_dir(cache)
    key = _fingerprint(root, files, val_fraction)
    paths = {split: folder / f"{name}-{key}-{split}.npy" for split in ("train", "val")}
    if not all(p.exists() for p in paths.values()):
        train, val = build_splits(root, files, val_fraction)
        folder.mkdir(parents=True, exist_ok=True)
        for split, array in (("train", train), ("val", val)):
            _atomic_save(paths[split], array)
    arrays = {split: np.load(p, mmap_mode="r") for split, p in paths.items()}
    return TextCorpus(arrays["train"], arrays["val"], name, len(files))


def build_splits(root: Path, files: Sequence[Path], val_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate ``files`` into (train, val) uint8 arrays with the rule of the module docstring."""
    _check_fraction(val_fraction)
    threshold = round(1000 * val_fraction)
    parts: dict[str, list[bytes]] = {"train": [], "val": []}
    for path in files:
        rel = path.relative_to(root).as_posix()
        split = "val" if zlib.crc32(rel.encode()) % 1000 < threshold else "train"
        parts[split].append(path.read_bytes())
    if len(files) < 2 or not parts["train"] or not parts["val"]:
        everything = _SEPARATOR.join(parts["train"] + parts["val"]) if len(files) > 1 else \
            b"".join(parts["train"] + parts["val"])
        cut = len(everything) - max(1, int(len(everything) * val_fraction))
        if cut < 1:
            raise ValueError(f"corpus of {len(everything)} bytes is too small to split")
        data = np.frombuffer(everything, dtype=np.uint8)
        return data[:cut].copy(), data[cut:].copy()
    return tuple(np.frombuffer(_SEPARATOR.join(parts[s]), dtype=np.uint8).copy()
                 for s in ("train", "val"))  # type: ignore[return-value]


def _atomic_save(path: Path, array: np.ndarray) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as handle:
        np.save(handle, np.ascontiguousarray(array, dtype=np.uint8))
    os.replace(tmp, path)


def sample_batch(data: np.ndarray, batch_size: int, block_size: int,
                 generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """``batch_size`` random windows: inputs ``x`` and next-byte targets ``y``, both (B, T) int64.

    Start offsets are drawn with ``generator``, so the same generator state gives the same batch.
    """
    if len(data) < block_size + 1:
        raise ValueError(f"text of {len(data)} bytes is shorter than block_size + 1 = {block_size + 1}")
    starts = torch.randint(0, len(data) - block_size, (batch_size,), generator=generator)
    offsets = starts.numpy()[:, None] + np.arange(block_size + 1)[None, :]
    windows = torch.from_numpy(np.asarray(data[offsets], dtype=np.int64))
    return windows[:, :-1], windows[:, 1:]


def docstrings(n: int = 64, min_chars: int = 200, max_chars: int = 1000,
               files: Iterable[Path] | None = None) -> list[str]:
    """A fixed set of ``n`` module docstrings (at least ``min_chars`` long, cut to
    ``max_chars``) from the standard library files, in sorted file order."""
    texts: list[str] = []
    for path in files if files is not None else stdlib_files():
        try:
            tree = ast.parse(path.read_bytes())
        except (SyntaxError, ValueError):
            continue
        doc = ast.get_docstring(tree)
        if doc and len(doc) >= min_chars:
            texts.append(" ".join(doc.split())[:max_chars])
            if len(texts) == n:
                break
    return texts
