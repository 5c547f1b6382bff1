"""The DiT benchmark runs end to end in its smoke setting and prints consistent figures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "dit.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(SCRIPT.parent.parent / "src"), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          env=env, timeout=120)


def test_smoke_run_prints_its_figures_as_json_last():
    result = _run("--smoke", "--device", "cpu")
    assert result.returncode == 0, result.stderr[-2000:]
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["model"] == "smoke" and figures["batch"] == 4
    for key in ("matmul_gflops", "train_ms_per_step", "train_images_per_s", "train_gflops",
                "train_fraction_of_matmul", "sample_forward_ms_per_image", "ddim2_ms_per_image",
                "ddim2_cfg_ms_per_image", "ddim2_cfg_over_unguided", "ddim2_overhead_vs_forward"):
        assert figures[key] > 0, key
    seconds = figures["train_ms_per_step"] / 1e3
    assert figures["train_images_per_s"] == pytest.approx(4 / seconds, rel=1e-2)
    # fwd + bwd convention: three forwards per image
    expected = 3 * figures["forward_flops_per_image"] * 4 / seconds / 1e9
    assert figures["train_gflops"] == pytest.approx(expected, rel=1e-2)
    ratio = figures["ddim2_cfg_ms_per_image"] / figures["ddim2_ms_per_image"]
    assert figures["ddim2_cfg_over_unguided"] == pytest.approx(ratio, rel=1e-2)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_a_gpu_is_one_line_exit_2():
    result = _run("--device", "cuda")
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "no CUDA GPU" in result.stderr
