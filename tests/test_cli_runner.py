"""CLI details of run/sweep: --list, usage errors, device, names, TensorBoard and MLflow sinks."""

from __future__ import annotations

import csv
import json

import pytest
import torch

import _toy_experiments as toy

# run starts a pool of every core: one xdist worker runs these (tests/conftest.py)
pytestmark = pytest.mark.xdist_group("processes")


def test_run_list_shows_experiments_with_descriptions():
    result = toy.invoke("run", "--list")
    assert result.exit_code == 0
    line = next(line for line in result.output.splitlines() if line.startswith("toy "))
    assert "toy regression for the runner's tests" in line
    assert toy.invoke("run").exit_code == 2  # no experiment and no --list


@pytest.mark.slow
def test_plain_progress_lines_without_tty_and_env_records_the_command(tmp_path):
    result = toy.invoke("run", "toy", "--quick", "--set", "acts=relu", "--out", tmp_path)
    assert result.exit_code == 0
    assert "%|" not in result.stderr and "it/s" not in result.stderr  # no progress bars
    assert "toy/quick_acts=relu: 2/2 units" in result.stderr  # a plain line instead
    env = json.loads((tmp_path / "toy" / "quick_acts=relu" / "env.json").read_text())
    assert isinstance(env["command"], list)
    assert env["torch_threads"] == 1  # one per unit, as reproduce: --workers changes no bits
    again = toy.invoke("run", "toy", "--quick", "--set", "acts=relu", "--threads", "0",
                       "--workers", "1", "--name", "torch-default", "--out", tmp_path)
    env = json.loads((tmp_path / "toy" / "torch-default" / "env.json").read_text())
    assert again.exit_code == 0 and env["torch_threads"] == torch.get_num_threads()


def test_progress_prints_a_line_on_a_clock_when_not_a_terminal(capsys):
    import time

    from actlab.runner.schedule import Progress

    bar = Progress(3, "exp/run", show=None, every_s=0.05)
    time.sleep(0.3)  # no unit finished, yet lines come
    bar.update(1)
    bar.close()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) >= 3 and lines[0].startswith("exp/run: 0/3 units, 0:00 elapsed")
    assert lines[-1].startswith("exp/run: 1/3 units")
    silent = Progress(3, "exp/run", show=False, every_s=0.05)
    time.sleep(0.2)
    silent.close()
    assert capsys.readouterr().err == ""


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_device_without_cuda_is_a_config_error(tmp_path):
    result = toy.invoke("run", "toy", "--device", "cuda", "--out", tmp_path)
    assert result.exit_code == 2 and "--device" in result.stderr


def test_invalid_run_name_is_refused(tmp_path):
    result = toy.invoke("run", "toy", "--name", "../escape", "--out", tmp_path)
    assert result.exit_code == 2 and "--name" in result.stderr


def test_tensorboard_and_mlflow_sinks_receive_the_table(tmp_path):
    result = toy.invoke("run", "toy", "--quick", "--set", "acts=tanh", "--seeds", "1", "--out",
                        tmp_path / "runs", "--tensorboard", tmp_path / "tb", "--mlflow",
                        tmp_path / "mlruns")
    assert result.exit_code == 0, result.output
    with open(tmp_path / "runs" / "toy" / "quick_acts=tanh_seeds=1" / "metrics.csv") as handle:
        losses = [float(r["value"]) for r in csv.DictReader(handle) if r["metric"] == "loss"]
    assert len(losses) == 6

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "tb" / "toy" / "quick_acts=tanh_seeds=1"))
    events.Reload()
    logged = [e.value for e in events.Scalars("tanh/loss/seed0")]
    assert logged == pytest.approx(losses, rel=1e-6)  # TensorBoard stores float32

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=(tmp_path / "mlruns").resolve().as_uri())
    run = client.search_runs([client.get_experiment_by_name("toy").experiment_id])[0]
    history = sorted(client.get_metric_history(run.info.run_id, "tanh/loss/seed0"), key=lambda m: m.step)
    assert [m.value for m in history] == losses
    assert run.data.params["steps"] == "6"
    assert run.data.metrics["summary/final_loss/tanh"] == pytest.approx(losses[-1])


@pytest.mark.slow
def test_native_flag_turns_the_kernels_on_and_is_recorded(tmp_path, monkeypatch):
    from actlab.activations import native

    monkeypatch.setenv(native.ENV_VAR, "0")  # restored after the test
    try:
        result = toy.invoke("run", "toy", "--quick", "--set", "acts=relu", "--native",
                            "--out", tmp_path)
        assert result.exit_code == 0, result.output
        env = json.loads((tmp_path / "toy" / "quick_acts=relu" / "env.json").read_text())
        # True where a compiler built the kernels; a failed build says so and runs on ATen.
        assert env["native_kernels"] is native.enabled()
        assert native.enabled() or "unavailable" in result.stderr
    finally:
        native.enable(False)


def test_run_and_sweep_default_to_every_core_longest_unit_first(monkeypatch):
    import os

    from actlab.cli.runner import _workers
    from actlab.runner.schedule import estimates, longest_first

    assert _workers(None, "cpu") == (os.cpu_count() or 1) and _workers(None, "cuda") == 1
    assert _workers(3, "cpu") == 3
    table = {"exp": {"a": 1.0, "b": 5.0, "c": 3.0}, "other": {"x": 10.0}}
    assert longest_first("exp", ["a", "b", "c", "new"], table) == [1, 2, 3, 0]
    # an unknown unit takes its experiment's mean; an unknown experiment the median of means
    assert estimates("exp", ["new"], table) == [3.0]
    assert estimates("unseen", ["u"], table) == [(3.0 + 10.0) / 2]

