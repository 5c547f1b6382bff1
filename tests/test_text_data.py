"""Byte corpora: folder and file builders, deterministic split, cache, batches, stdlib sources."""

from __future__ import annotations

import os
import zlib

import numpy as np
import pytest
import torch

from actlab.data.text import (
    docstrings,
    load_corpus,
    sample_batch,
    stdlib_files,
    stdlib_root,
    text_corpus,
)


def _folder(tmp_path, n: int = 30):
    root = tmp_path / "src"
    (root / "pkg").mkdir(parents=True)
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "junk.txt").write_bytes(b"never read")
    (root / ".hidden.txt").write_bytes(b"never read either")
    files = {}
    for i in range(n):
        rel = f"pkg/file{i:02d}.txt" if i % 2 else f"file{i:02d}.txt"
        data = f"file {i}: ".encode() + bytes([65 + i % 26]) * (50 + i)
        (root / rel).write_bytes(data)
        files[rel] = data
    return root, files


def test_folder_corpus_splits_by_file_hash_and_keeps_every_byte(tmp_path) -> None:
    root, files = _folder(tmp_path)
    corpus = text_corpus(root, cache=tmp_path / "cache", val_fraction=0.3)
    val = sorted(r for r in files if zlib.crc32(r.encode()) % 1000 < 300)
    train = sorted(r for r in files if r not in val)
    assert val and train  # this file set exercises the hash split
    assert corpus.n_files == len(files)
    assert bytes(corpus.val) == b"\n\n".join(files[r] for r in val)
    assert bytes(corpus.train) == b"\n\n".join(files[r] for r in train)
    assert corpus.train.dtype == np.uint8 and corpus.vocab_size == 256


def test_cache_is_reused_and_rebuilt_when_a_file_changes(tmp_path) -> None:
    root, files = _folder(tmp_path)
    cache = tmp_path / "cache"
    first = text_corpus(root, cache=cache)
    saved = sorted(p.name for p in cache.glob("*.npy"))
    assert len(saved) == 2 and not list(cache.glob(".*tmp"))
    again = text_corpus(root, cache=cache)
    assert isinstance(again.train, np.memmap) and np.array_equal(again.train, first.train)
    assert sorted(p.name for p in cache.glob("*.npy")) == saved  # nothing rebuilt
    target = root / "file00.txt"
    target.write_bytes(b"changed content " * 5)
    os.utime(target, ns=(1, 1))
    changed = text_corpus(root, cache=cache)
    assert len(list(cache.glob("*.npy"))) == 4
    assert b"changed content" in bytes(changed.train) + bytes(changed.val)


def test_cache_dir_from_environment(tmp_path, monkeypatch) -> None:
    root, _ = _folder(tmp_path, 4)
    monkeypatch.setenv("ACTLAB_CACHE", str(tmp_path / "envcache"))
    text_corpus(root)
    assert len(list((tmp_path / "envcache").glob("*.npy"))) == 2


def test_single_file_is_split_by_position(tmp_path) -> None:
    path = tmp_path / "book.txt"
    data = bytes(range(256)) * 4
    path.write_bytes(data)
    corpus = load_corpus(str(path), cache=tmp_path / "c", val_fraction=0.25)
    assert bytes(corpus.train) == data[:768] and bytes(corpus.val) == data[768:]


def test_bad_inputs(tmp_path) -> None:
    with pytest.raises(FileNotFoundError):
        text_corpus(tmp_path / "missing")
    with pytest.raises(ValueError, match="val_fraction"):
        text_corpus(_folder(tmp_path)[0], cache=tmp_path / "c", val_fraction=1.5)
    with pytest.raises(ValueError, match="no files"):
        empty = tmp_path / "empty"
        empty.mkdir()
        text_corpus(empty)
    with pytest.raises(ValueError, match="shorter"):
        sample_batch(np.zeros(5, dtype=np.uint8), 2, 8, torch.Generator())


def test_sample_batch_windows_and_targets() -> None:
    data = np.frombuffer(bytes(range(200)), dtype=np.uint8)
    x, y = sample_batch(data, 6, 10, torch.Generator().manual_seed(3))
    assert x.shape == y.shape == (6, 10) and x.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1])
    assert torch.equal(y - x, torch.ones_like(x))  # consecutive bytes of this data
    x2, _ = sample_batch(data, 6, 10, torch.Generator().manual_seed(3))
    assert torch.equal(x, x2)


def test_stdlib_sources_and_docstrings() -> None:
    files = stdlib_files()
    names = {p.relative_to(stdlib_root()).as_posix() for p in files}
    assert "os.py" in names and "json/__init__.py" in names
    assert not any("site-packages" in n.split("/") or n.startswith("test/") for n in names)
    texts = docstrings(3, files=files)
    assert len(texts) == 3 and all(len(t) >= 200 for t in texts)
    assert texts == docstrings(3, files=files)
