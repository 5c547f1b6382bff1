"""Device policy that needs no GPU to check: refusals, Ray resources, precision flags."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from actlab.runner.backends import ray_resources
from actlab.train.precision import precision_flags, use_strict_float32

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _toy_experiments as toy  # noqa: E402


@pytest.mark.parametrize("command", ["run", "reproduce"])
def test_native_with_a_cuda_device_is_refused_in_one_line(tmp_path, command):
    args = ["toy"] if command == "run" else ["--only", "toy"]
    result = toy.invoke(command, *args, "--quick", "--native", "--device", "cuda", "--out", tmp_path)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --native") and "CPU" in lines[0]
    assert "Traceback" not in result.output
    assert not (tmp_path / "toy").exists()  # refused before any work


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_cuda_without_a_gpu_says_so_in_one_line(tmp_path, device):
    result = toy.invoke("run", "toy", "--quick", "--device", device, "--out", tmp_path)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert lines == ["error: --device: cuda is not available on this machine"]


def test_ray_asks_for_a_gpu_per_task_only_on_cuda():
    assert ray_resources("cpu") == {"num_cpus": 1}
    assert ray_resources("cuda") == {"num_cpus": 1, "num_gpus": 1}
    assert ray_resources("cuda:3") == {"num_cpus": 1, "num_gpus": 1}


def test_strict_float32_turns_tf32_off_and_env_records_it(tmp_path):
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
             torch.get_float32_matmul_precision())
    try:
        torch.backends.cudnn.allow_tf32 = True
        torch.set_float32_matmul_precision("high")
        use_strict_float32()
        flags = precision_flags()
        assert flags["cuda_matmul_allow_tf32"] is False
        assert flags["cudnn_allow_tf32"] is False
        assert flags["float32_matmul_precision"] == "highest"

        torch.backends.cudnn.allow_tf32 = True  # a run must switch it off again itself
        result = toy.invoke("run", "toy", "--quick", "--set", "acts=relu", "--out", tmp_path)
        assert result.exit_code == 0, result.output
        env = json.loads((tmp_path / "toy" / "quick_acts=relu" / "env.json").read_text())
        assert env["precision"]["cudnn_allow_tf32"] is False
        assert env["precision"]["cuda_matmul_allow_tf32"] is False
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[:2]
        torch.set_float32_matmul_precision(saved[2])
