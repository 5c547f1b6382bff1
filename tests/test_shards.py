"""Token shards (``data="shards:DIR"``): headed and raw files written here read back as written,
several shards join end to end, bad files fail with a clear error, and the byte-level shards
of a text train exactly like the text."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

from actlab.data.shards import (
    HEADER_INTS,
    MAGIC,
    ShardError,
    TokenStream,
    read_shard,
    write_shard,
)
from actlab.data.text import load_corpus, sample_batch
from actlab.recipes.language_model import LMScale, train_gpt

from _corpus import write_code_folder

TOOL = Path(__file__).resolve().parents[1] / "tools" / "write_shards.py"


def _tokens(n: int, top: int = 50_257, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, top, n).astype(np.uint16)


def _headed_bytes(tokens: np.ndarray, magic: int = MAGIC, version: int = 1,
                  count: int | None = None) -> bytes:
    """A FineWeb-style shard written out by hand: 256 int32 (magic, version, count), then ids."""
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[:3] = (magic, version, len(tokens) if count is None else count)
    return header.tobytes() + tokens.astype("<u2").tobytes()


def test_headed_and_raw_shards_read_back_as_written(tmp_path) -> None:
    tokens = _tokens(1000)
    (tmp_path / "hand.bin").write_bytes(_headed_bytes(tokens))
    (tmp_path / "raw.bin").write_bytes(tokens.astype("<u2").tobytes())
    for name in ("hand.bin", "raw.bin"):
        got = read_shard(tmp_path / name)
        assert got.dtype == np.uint16 and np.array_equal(got, tokens), name
    written = write_shard(tmp_path / "ours.bin", tokens)
    assert written.read_bytes() == _headed_bytes(tokens)  # the tool's files are the same format
    assert write_shard(tmp_path / "ours_raw.bin", tokens, header=False).stat().st_size == 2000


def test_bad_files_fail_with_the_reason(tmp_path) -> None:
    tokens = _tokens(600)
    cases = {"magic.bin": (_headed_bytes(tokens, magic=20240521), "wrong magic number 20240521"),
             "count.bin": (_headed_bytes(tokens, count=601), "counts 601 tokens, the file holds 600"),
             "version.bin": (_headed_bytes(tokens, version=2), "unsupported shard version 2"),
             "odd.bin": (b"\x01\x02\x03", "not a whole number of uint16 tokens")}
    for name, (data, message) in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(ShardError, match=message):
            read_shard(tmp_path / name)


def test_shard_folder_joins_its_shards_and_checks_the_vocabulary(tmp_path) -> None:
    parts = [_tokens(700, seed=s) for s in range(3)]
    for i, part in enumerate(parts):
        write_shard(tmp_path / f"fineweb_train_{i:06d}.bin", part)
    write_shard(tmp_path / "fineweb_val_000000.bin", _tokens(300, seed=9))
    corpus = load_corpus(f"shards:{tmp_path}", vocab_size=50_257)
    joined = np.concatenate(parts)
    assert isinstance(corpus.train, TokenStream) and len(corpus.train) == 2100
    offsets = np.array([[0, 699, 700, 701], [1399, 1400, 2099, 5]])
    assert np.array_equal(corpus.train[offsets], joined[offsets])  # across shard borders
    x, y = sample_batch(corpus.train, 4, 16, torch.Generator().manual_seed(0))
    starts = torch.randint(0, 2100 - 16, (4,), generator=torch.Generator().manual_seed(0))
    for row, start in zip(x, starts):
        assert torch.equal(row, torch.from_numpy(joined[start:start + 16].astype(np.int64)))
    assert torch.equal(x[:, 1:], y[:, :-1])
    only_train = tmp_path / "only_train"
    only_train.mkdir()
    write_shard(only_train / "train.bin", _tokens(100), header=False)
    with pytest.raises(ShardError, match=r"needs .bin shards named \*train\* and \*val\*"):
        load_corpus(f"shards:{only_train}")
    with pytest.raises(FileNotFoundError, match="no such shard folder"):
        load_corpus(f"shards:{tmp_path / 'nowhere'}")


def test_an_id_beyond_the_vocabulary_names_file_and_position(tmp_path) -> None:
    tokens = np.arange(300, dtype=np.uint16) % 256
    tokens[123] = 300
    write_shard(tmp_path / "train.bin", tokens, header=False)
    write_shard(tmp_path / "val.bin", tokens[:50], header=False)
    with pytest.raises(ShardError, match=r"train.bin: token id 300 at position 123 is >= the "
                                         r"vocabulary size 256"):
        load_corpus(f"shards:{tmp_path}", vocab_size=256)
    assert load_corpus(f"shards:{tmp_path}", vocab_size=301).vocab_size == 301


def test_byte_shards_of_a_text_train_exactly_like_the_text(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("ACTLAB_CACHE", str(tmp_path / "cache"))
    text = write_code_folder(tmp_path / "text", files=6, repeats=30)
    spec = importlib.util.spec_from_file_location("write_shards_tool", TOOL)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    assert tool.main([str(text), str(tmp_path / "shards"), "--tokens-per-shard", "1000"]) == 0
    assert len(list((tmp_path / "shards").glob("bytes_train_*.bin"))) > 1
    assert tool.main([str(tmp_path / "missing"), str(tmp_path / "x")]) == 2

    runs = {}
    for data in (str(text), f"shards:{tmp_path / 'shards'}"):
        scale = LMScale(data=data, n_layer=1, n_head=2, n_embd=16, block_size=16, batch_size=4,
                        steps=4, eval_batches=1, compile_model="off")
        corpus = scale.corpus()
        model, result = train_gpt(scale.model_config(), scale.train_config(), corpus, seed=0,
                                  batch_size=4, eval_batches=1)
        runs[data] = (result.history, model.state_dict())
    (history_a, state_a), (history_b, state_b) = runs.values()
    assert history_a == history_b
    assert all(torch.equal(state_a[k], state_b[k]) for k in state_a)
