"""The prepared GPU benchmark runs end to end (tiny shapes on the CPU) and refuses CUDA cleanly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(SCRIPT.parent.parent / "src"), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          env=env, timeout=300)


def test_smoke_run_prints_its_figures_as_json_last():
    result = _run("--smoke", "--device", "cpu")
    assert result.returncode == 0, result.stderr[-2000:]
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    for key in ("fp32_matmul_tflops", "bf16_matmul_tflops", "ensemble_eager_ms",
                "ensemble_eager_fraction_of_fp32_matmul", "gpt_eager_tokens_per_s",
                "gpt_eager_fraction_of_bf16_matmul"):
        assert figures[key] > 0, key
    assert figures["ensemble_graphed_speedup"] is None  # graphs need CUDA, and it says so


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_a_gpu_is_one_line_exit_2():
    result = _run()
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "no CUDA GPU" in result.stderr
