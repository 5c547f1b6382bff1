"""Multi-process units (``--nproc``): a unit of the GPT, DiT and ViT recipes on 2 gloo ranks
under torchrun records the rows one process records on the global batch (float64, to
1e-6); a rank's failure fails the unit with its error; a Ray run places two multi-process
units on a local cluster with the local backend's numbers; bad --nproc is refused in one
line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch.distributed as dist

from actlab.errors import ConfigError
from actlab.runner.config import build_config, config_to_dict
from actlab.runner.driver import RunOptions, run_experiment
from actlab.runner.execute import UnitTask, execute_unit
from actlab.runner.experiment import get_experiment
from actlab.runner.multiprocess import check_nproc

import _toy_experiments as toy

needs_gloo = pytest.mark.skipif(not dist.is_available() or sys.platform == "win32",
                                reason="needs torch.distributed with gloo")
TIMING = ("first_step_s", "steps_per_s")  # clocks, not results
HELPER = Path(__file__).with_name("_ddp_units.py")

# Tiny float64 scales of the three recipes (every other field the quick scale's).
UNITS = {
    "lm-shift": {"steps": 6, "n_layer": 1, "n_embd": 16, "n_head": 2, "block_size": 16,
                 "batch_size": 8, "eval_batches": 2, "probe_every": 3, "eval_every": 3,
                 "warmup": 1, "dtype": "float64", "activations": ["relu"],
                 "probe_batches": 1},
    "dit-shift": {"steps": 4, "hidden_size": 16, "depth": 1, "num_heads": 2, "batch_size": 8,
                  "log_points": 2, "eval_points": 1, "fid_samples": 20, "sample_steps": 2,
                  "sample_batch": 7, "loss_samples": 16, "grid_per_class": 1,
                  "dtype": "float64"},
    "vit-shift": {"steps": 4, "dim": 16, "depth": 1, "heads": 2, "batch_size": 8,
                  "log_points": 2, "dtype": "float64"},
}


def _task(name: str, workdir: Path, unit_index: int = 1) -> UnitTask:
    experiment = get_experiment(name)
    config = build_config(experiment.Config, {**experiment.quick, **UNITS[name]})
    unit = experiment.units(config)[unit_index]  # the shifted condition: its probe too
    return UnitTask(experiment=name, module=type(experiment).__module__, module_root=None,
                    config=config_to_dict(config), point={}, unit=unit, seeds=[0],
                    unit_id=f"{name}-u", workdir=str(workdir / name), threads=1)


def _rows(record: dict) -> dict[tuple, float]:
    return {tuple(r[:5]): r[5] for r in record["rows"] if not r[4].startswith(TIMING)}


def _assert_same_rows(one: dict, ranks: dict) -> None:
    assert one["status"] == ranks["status"] == "ok", (one["error"], ranks["error"])
    a, b = _rows(one), _rows(ranks)
    assert a.keys() == b.keys() and a
    for key, value in a.items():  # float64 through DDP: reduction order only
        assert abs(value - b[key]) <= 1e-6 * max(1.0, abs(value)), (key, value, b[key])


def _torchrun(*args: str | Path, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc_per_node", "2", *map(str, args)],
                          env=env, capture_output=True, text=True, timeout=timeout)


@needs_gloo
@pytest.mark.slow
@pytest.mark.xdist_group("processes")  # 2 gloo ranks (tests/conftest.py)
def test_gpt_dit_and_vit_units_on_two_ranks_equal_one_process(tmp_path) -> None:
    tasks = [_task(name, tmp_path / "ranks") for name in UNITS]
    (tmp_path / "tasks.json").write_text(json.dumps([t.__dict__ for t in tasks]))
    proc = _torchrun(HELPER, tmp_path / "tasks.json", tmp_path / "records.json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    on_ranks = json.loads((tmp_path / "records.json").read_text())
    for task, ranks in zip(tasks, on_ranks):
        assert ranks["world_size"] == 2
        one = execute_unit(_task(task.experiment, tmp_path / "one"))
        _assert_same_rows(one, ranks)
        metrics = {key[4] for key in _rows(one)}
        # the probe's merged statistics are among the rows compared
        assert {"hidden_mean", "act_mean"} <= metrics, task.experiment
    dit = _rows(on_ranks[1])
    assert any(key[4] == "fid_digits-classifier" for key in dit)  # sample quality, shared out


@needs_gloo
@pytest.mark.slow
@pytest.mark.xdist_group("processes")
def test_a_failing_rank_fails_the_unit_with_its_error(tmp_path) -> None:
    from actlab.runner.multiprocess import execute_multiprocess

    task = UnitTask(experiment="no-such-experiment", module="actlab.experiments",
                    module_root=None, config={}, point={}, unit={}, seeds=[0], unit_id="u",
                    workdir=str(tmp_path / "u"), nproc=2, threads=1)
    record = execute_multiprocess(task)
    assert record["status"] == "failed" and record["id"] == "u"
    assert "unknown experiment 'no-such-experiment'" in record["error"]


@needs_gloo
@pytest.mark.slow
@pytest.mark.xdist_group("processes")  # a Ray instance and gloo ranks
def test_ray_places_two_multiprocess_units(tmp_path) -> None:
    ray = pytest.importorskip("ray", reason="the ray extra is not installed")
    sets = {k: str(v) for k, v in UNITS["vit-shift"].items()}
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        on_ray = run_experiment("vit-shift", "quick", sets, None, 1, RunOptions(
            out=tmp_path, name="ray", backend="ray", nproc=2, progress=False))
    finally:
        ray.shutdown()
    local = run_experiment("vit-shift", "quick", sets, None, 1, RunOptions(
        out=tmp_path, name="local", progress=False))
    assert on_ray.ok and local.ok and on_ray.n_units == 2

    def records(name: str) -> dict[str, dict]:
        folder = tmp_path / "vit-shift" / name / "units"
        return {r["unit"]["condition"]: r for r in
                (json.loads(p.read_text()) for p in folder.glob("*.json"))}

    on_ranks, one = records("ray"), records("local")
    assert set(on_ranks) == set(one) == {"unshifted", "shifted"}
    for condition, ranks in on_ranks.items():
        assert ranks["world_size"] == 2 and "world_size" not in one[condition]
        _assert_same_rows(one[condition], ranks)


def test_nproc_is_refused_where_it_cannot_run() -> None:
    with pytest.raises(ConfigError, match="--nproc.*must be >= 1"):
        check_nproc(0)
    with pytest.raises(ConfigError, match="signal does not run its units data-parallel.*"
                                          "lm-shift"):
        check_nproc(2, experiment=get_experiment("signal"))
    with pytest.raises(ConfigError, match="give --device cuda"):
        check_nproc(2, device="cuda:1", experiment=get_experiment("vit-shift"))
    check_nproc(2, experiment=get_experiment("vit-shift"))  # fine on the CPU


def test_cli_refuses_bad_nproc_in_one_line(tmp_path) -> None:
    result = toy.invoke("run", "toy", "--quick", "--nproc", "2", "--out", tmp_path)
    assert result.exit_code == 2
    assert result.stderr.strip().count("\n") == 0 and "--nproc" in result.stderr
    assert "Traceback" not in result.stderr
