"""``torchrun --nproc_per_node 2 -m actlab.recipes.language_model`` (gloo, CPU) matches one
process.

The runs are in float64: the gradient of the attention key biases is zero in exact arithmetic
(softmax ignores a constant added to every score), so in float32 it is pure rounding noise,
which differs with the reduction order and which Adam's normalisation blows up to ~lr * 1e-2.
In float64 that noise is ~1e-8 smaller and any real difference between the two runs shows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from actlab.nn.gpt import GPT, GPTConfig
from actlab.recipes.language_model import main

pytestmark = [pytest.mark.slow,
              pytest.mark.xdist_group("processes")]  # torchrun, 2 ranks (tests/conftest.py)

ARGS = ["--steps", "3", "--batch-size", "8", "--block-size", "16", "--n-layer", "2",
        "--n-head", "2", "--n-embd", "16", "--warmup", "1", "--lr", "1e-2", "--eval-every", "3",
        "--eval-batches", "2", "--log-every", "1", "--device", "cpu", "--seed", "3", "--dtype", "float64"]


def test_two_gloo_processes_reach_the_parameters_of_one(tmp_path, monkeypatch) -> None:
    words = [b"alpha", b"beta", b"gamma", b"delta", b"import", b"return", b"self", b"(x)"]
    g = torch.Generator().manual_seed(0)
    text = b" ".join(words[i] for i in torch.randint(0, len(words), (4000,), generator=g).tolist())
    (tmp_path / "text.txt").write_bytes(text)
    cache = tmp_path / "cache"
    monkeypatch.setenv("ACTLAB_CACHE", str(cache))
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    data = ["--data", str(tmp_path / "text.txt")]

    assert main([*data, *ARGS, "--out", str(tmp_path / "one")]) == 0  # builds the cache too

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         "-m", "actlab.recipes.language_model", *data, *ARGS, "--out", str(tmp_path / "two")],
        env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "world size 2 on cpu" in proc.stdout

    one = load_file(str(tmp_path / "one" / "last.safetensors"))
    two = load_file(str(tmp_path / "two" / "last.safetensors"))
    model_keys = [k for k in one if k.startswith("model.")]
    assert model_keys and set(model_keys) == {k for k in two if k.startswith("model.")}
    for key in model_keys:
        assert torch.allclose(one[key], two[key], rtol=0, atol=1e-6), key
    # the runs did train: parameters moved well beyond the tolerance from their initial values
    start = GPT(GPTConfig(block_size=16, n_layer=2, n_head=2, n_embd=16), seed=3).state_dict()
    assert max(float((one[f"model.{k}"] - v.double()).abs().max()) for k, v in start.items()) > 1e-3
    h1 = json.loads((tmp_path / "one" / "history.json").read_text())
    h2 = json.loads((tmp_path / "two" / "history.json").read_text())
    assert [h["step"] for h in h1] == [h["step"] for h in h2]
    for a, b in zip(h1, h2):
        for key in ("train_loss", "val_loss"):
            if key in a:
                assert abs(a[key] - b[key]) < 1e-6, (a, b)
