"""Device policy that needs no GPU to check: refusals, Ray resources, precision flags."""

from __future__ import annotations

import json

import pytest
import torch

from actlab.runner.backends import ray_resources
from actlab.train.precision import precision_flags, use_strict_float32

import _toy_experiments as toy


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


@pytest.mark.xdist_group("processes")  # run: a pool of every core (tests/conftest.py)
@pytest.mark.slow
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


def _built_in_experiments() -> list[str]:
    from actlab.runner.experiment import list_experiments

    return sorted(n for n, c in list_experiments().items()
                  if c.__module__.startswith("actlab.experiments"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_every_experiment_refuses_cuda_in_one_line_without_a_gpu(tmp_path):
    names = _built_in_experiments()
    assert len(names) >= 20
    for name in names:
        result = toy.invoke("run", name, "--quick", "--device", "cuda", "--out", tmp_path)
        assert result.exit_code == 2, name
        assert result.stderr.strip().splitlines() == [
            "error: --device: cuda is not available on this machine"], name
        assert not (tmp_path / name).exists(), name  # refused before any work


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_every_experiment_runs_on_cuda_or_refuses_in_one_line(tmp_path):
    # The registry walk on a GPU: each experiment at quick scale finishes, or (a missing
    # optional model) refuses with one line before any work.
    failures = []
    for name in _built_in_experiments():
        result = toy.invoke("run", name, "--quick", "--device", "cuda", "--out", tmp_path)
        if result.exit_code == 2:
            lines = result.stderr.strip().splitlines()
            if len(lines) != 1 or (tmp_path / name).exists():
                failures.append((name, result.stderr[-300:]))
            continue
        status = json.loads(next((tmp_path / name).glob("*/status.json")).read_text())
        if result.exit_code != 0 or status["units"]["failed"]:
            failures.append((name, result.output[-300:]))
    assert not failures, failures
