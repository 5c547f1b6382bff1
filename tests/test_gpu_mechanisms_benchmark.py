"""The GPU timing script of the sparsity mechanisms runs end to end in its smoke setting."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu_mechanisms.py"
ENV = {**os.environ, "PYTHONPATH": str(SCRIPT.parent.parent / "src"), "OMP_NUM_THREADS": "1"}


def test_smoke_run_times_every_path_against_its_baseline_json_last():
    result = subprocess.run([sys.executable, str(SCRIPT), "--smoke", "--device", "cpu"],
                            capture_output=True, text=True, env=ENV, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    keys = [f"speed_vs_gelu[{spec}]" for spec in ("gelu:topk=0.1", "gelu:topk=0.1:freeze_after=1",
                                                   "gelu:topk=0.1:gaussian",
                                                   "gelu:topk=0.1:gaussian_shift", "gelu:adaptive")]
    keys += [f"{kind}_speed_vs_layernorm_{shape}" for kind in ("dynamic", "frozen")
             for shape in ("16x32", "4x4x4x4")]
    for key in keys:
        assert 0 < figures[key + "_p05"] <= figures[key] <= figures[key + "_p95"], key
    assert figures["gelu_ms"] > 0 and figures["layernorm_ms_16x32"] > 0


def test_cuda_without_a_gpu_is_a_one_line_error():
    if torch.cuda.is_available():
        return
    result = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True,
                            env=ENV, timeout=60)
    assert result.returncode == 2 and "no CUDA GPU here" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
