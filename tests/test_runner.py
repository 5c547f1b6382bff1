"""The runner: planning, run directories, determinism, failures, bad config, resume."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from actlab.runner.driver import RunOptions, run_experiment
from actlab.runner.experiment import get_experiment
from actlab.runner.plan import make_plan, parse_grid, unit_id

import _toy_experiments as toy

# run, sweep and reproduce start a pool of every core: one xdist worker runs these
# (tests/conftest.py)
pytestmark = pytest.mark.xdist_group("processes")


def read_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def units(run_dir: Path) -> dict[str, dict]:
    """Unit records keyed by activation."""
    records = [json.loads(p.read_text()) for p in sorted((run_dir / "units").glob("*.json"))]
    return {(r["unit"]["act"], tuple(r["seeds"])): r for r in records}


def test_plan_ids_seed_groups_and_grid_parsing():
    experiment = get_experiment("toy")
    plan = make_plan(experiment, "quick", {"acts": "relu,tanh,sigmoid"}, None, 3)
    assert plan.seeds == [0, 1, 2]
    assert [(u.unit["act"], u.seeds) for u in plan.units][:3] == [
        ("relu", (0,)), ("relu", (1,)), ("relu", (2,))]
    assert plan.configs[0].steps == 6 and plan.configs[0].acts == ("relu", "tanh", "sigmoid")
    again = make_plan(get_experiment("toy"), "quick", {"acts": "relu,tanh,sigmoid"}, None, 3)
    assert [u.id for u in plan.units] == [u.id for u in again.units]
    assert len({u.id for u in plan.units}) == 9
    assert unit_id({}, {"act": "relu"}, (0,)) != unit_id({}, {"act": "relu"}, (1,))
    ensemble = make_plan(get_experiment("toy-ensemble"), "quick", None, None, 4)
    assert [u.seeds for u in ensemble.units] == [(0, 1, 2, 3), (0, 1, 2, 3)]
    assert parse_grid(["lr=0.1,0.2", "lr=0.3", "acts=relu,tanh|relu"]) == {
        "lr": ["0.1", "0.2", "0.3"], "acts": ["relu,tanh", "relu"]}


@pytest.mark.slow
def test_run_writes_the_run_directory(tmp_path):
    result = toy.invoke("run", "toy", "--quick", "--out", tmp_path)
    assert result.exit_code == 0, result.output
    run_dir = tmp_path / "toy" / "quick"
    for name in ("config.json", "env.json", "metrics.csv", "metrics.parquet", "summary.json",
                 "report.html", "figures/loss.png", "claims.json", "status.json"):
        assert (run_dir / name).is_file(), name
    assert not (run_dir / "work").exists()
    assert not list(run_dir.rglob("*.tmp"))
    header = (run_dir / "metrics.csv").read_text().splitlines()[0]
    assert header == "run,seed,step,layer,metric,value"
    rows = read_rows(run_dir / "metrics.csv")
    assert len(rows) == 2 * 2 * 6 * 2  # acts x seeds x steps x (loss, weight_mean)
    config = json.loads((run_dir / "config.json").read_text())
    assert config["config"]["steps"] == 6 and config["seeds"] == [0, 1] and config["scale"] == "quick"
    env = json.loads((run_dir / "env.json").read_text())
    assert env["packages"]["torch"] and env["torch_threads"] >= 1 and env["device"] == "cpu"
    assert "command" in env and "git" in env
    # The summary is what the table says: recompute the final loss from metrics.csv.
    summary = json.loads((run_dir / "summary.json").read_text())
    for act in ("relu", "tanh"):
        finals = [float(r["value"]) for r in rows
                  if r["run"] == act and r["metric"] == "loss" and r["step"] == "5"]
        assert len(finals) == 2
        assert summary["final_loss"][act] == pytest.approx(sum(finals) / 2, rel=1e-12)
    import pandas as pd

    parquet = pd.read_parquet(run_dir / "metrics.parquet")
    assert list(parquet.columns) == ["run", "seed", "step", "layer", "metric", "value"]
    assert parquet["value"].tolist() == [float(r["value"]) for r in rows]


@pytest.mark.slow
def test_same_command_twice_gives_byte_identical_metrics(tmp_path):
    args = ["run", "toy", "--quick", "--set", "acts=relu,sigmoid", "--seeds", "3"]
    first = toy.invoke(*args, "--out", tmp_path / "a")
    second = toy.invoke(*args, "--out", tmp_path / "b")
    assert first.exit_code == 0 and second.exit_code == 0
    name = "quick_acts=relu,sigmoid_seeds=3"  # documented default name
    a = (tmp_path / "a" / "toy" / name / "metrics.csv").read_bytes()
    b = (tmp_path / "b" / "toy" / name / "metrics.csv").read_bytes()
    assert a == b
    assert (tmp_path / "a" / "toy" / name / "summary.json").read_bytes() == (
        tmp_path / "b" / "toy" / name / "summary.json").read_bytes()
    other = toy.invoke("run", "toy", "--quick", "--set", "acts=relu,sigmoid", "--out", tmp_path / "c")
    assert other.exit_code == 0
    c = (tmp_path / "c" / "toy" / "quick_acts=relu,sigmoid" / "metrics.csv").read_bytes()
    assert c != a and len(c) < len(a)  # 2 seeds instead of 3: a real, different table


@pytest.mark.slow
def test_diverged_and_failed_units_are_recorded_and_the_run_goes_on(tmp_path):
    result = toy.invoke("run", "toy", "--quick", "--set", "acts=relu,tanh,sigmoid",
                        "--set", "fail_act=tanh", "--set", "diverge_act=relu", "--out", tmp_path,
                        "--name", "faults")
    assert result.exit_code == 1
    assert "boom in tanh" in result.stderr and "act=tanh" in result.stderr
    run_dir = tmp_path / "toy" / "faults"
    records = units(run_dir)
    for seed in (0, 1):
        assert records[("relu", (seed,))]["status"] == "diverged"
        failed = records[("tanh", (seed,))]
        assert failed["status"] == "failed" and failed["rows"] == []
        assert "Traceback" in failed["error"] and "RuntimeError: boom in tanh" in failed["error"]
        assert records[("sigmoid", (seed,))]["status"] == "ok"
    rows = read_rows(run_dir / "metrics.csv")
    relu_loss = [float(r["value"]) for r in rows if r["run"] == "relu" and r["metric"] == "loss"]
    assert relu_loss and not math.isfinite(relu_loss[-1])  # kept up to the divergence
    assert {r["run"] for r in rows} == {"relu", "sigmoid"}
    status = json.loads((run_dir / "status.json").read_text())
    assert status["units"] == {"ok": 2, "diverged": 2, "failed": 2}
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["statuses"] == ["diverged", "diverged", "failed", "failed", "ok", "ok"]


def test_runner_marks_non_finite_loss_as_diverged_when_the_experiment_does_not(tmp_path):
    outcome = run_experiment("toy", "quick", {"acts": "relu", "diverge_act": "relu",
                                              "flag_divergence": "false"}, None, 1,
                             RunOptions(out=tmp_path, progress=False))
    assert outcome.ok and len(outcome.diverged) == 1
    record = json.loads(next((outcome.path / "units").glob("*.json")).read_text())
    assert record["status"] == "diverged" and "loss is inf at step" in record["error"]


def test_a_non_finite_value_of_any_metric_marks_the_unit_diverged(tmp_path):
    # the loss stays finite; one weight_mean row is nan: the unit is diverged, the metric,
    # step, run and seed named, and the other activation's unit stays ok
    outcome = run_experiment("toy", "quick", {"nan_metric_act": "tanh"}, None, 1,
                             RunOptions(out=tmp_path, progress=False))
    assert outcome.ok and len(outcome.diverged) == 1, outcome.diverged
    records = [json.loads(p.read_text()) for p in (outcome.path / "units").glob("*.json")]
    status = {r["unit"]["act"]: (r["status"], r["error"]) for r in records}
    assert status["relu"] == ("ok", None)
    assert status["tanh"] == ("diverged", "diverged: weight_mean is nan at step 3 "
                                          "(tanh, seed 0, layer w1)")


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["run", "toy", "--set", "lr=-1"], "lr"),
        (["run", "toy", "--set", "lr=inf"], "lr"),  # refused as nan is
        (["run", "toy", "--set", "lr=nan"], "lr"),
        (["run", "toy", "--set", "lrr=0.1"], "lrr"),
        (["run", "toy", "--set", "steps=abc"], "steps"),
        (["run", "toy", "--set", "acts=relu,swish"], "acts"),
        (["run", "toy", "--set", "noequals"], "noequals"),
        (["run", "toy", "--seeds", "0"], "--seeds"),
        (["run", "toyy"], "toyy"),
        (["sweep", "toy", "--grid", "lr=0.1,-2"], "lr"),
        (["sweep", "toy", "--grid", "lr=0.1", "--set", "lr=0.2"], "lr"),
        (["sweep", "toy", "--grid", "lr=0.1", "--workers", "0"], "--workers"),
    ],
)
def test_bad_config_exits_2_with_one_line_naming_the_field(tmp_path, args, field):
    result = toy.invoke(*args, "--out", tmp_path)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error:") and field in lines[0]
    assert not list(tmp_path.rglob("*.json"))  # nothing ran
    if field == "lrr":
        assert "did you mean lr" in lines[0]
    if field == "toyy":
        assert "did you mean toy" in lines[0]


def test_resume_skips_finished_units_and_reruns_failed_or_unreadable_ones(tmp_path):
    options = RunOptions(out=tmp_path / "r", name="resumed", progress=False)
    toy.FAIL_ACTS.add("tanh")
    try:
        first = run_experiment("toy", "quick", None, None, None, options)
    finally:
        toy.FAIL_ACTS.clear()
    assert len(first.failed) == 2 and first.n_units == 4
    run_dir = first.path
    relu_seed0 = units(run_dir)[("relu", (0,))]["id"]
    (run_dir / "units" / f"{relu_seed0}.json").write_text('{"id": "' + relu_seed0 + '", "sta')
    resumed = run_experiment("toy", "quick", None, None, None,
                             RunOptions(out=tmp_path / "r", name="resumed", resume=True, progress=False))
    assert resumed.ok and resumed.n_skipped == 1  # relu seed 1 only; truncated file reran
    clean = run_experiment("toy", "quick", None, None, None,
                           RunOptions(out=tmp_path / "c", name="resumed", progress=False))
    assert (run_dir / "metrics.csv").read_bytes() == (clean.path / "metrics.csv").read_bytes()
    assert (run_dir / "summary.json").read_bytes() == (clean.path / "summary.json").read_bytes()
    # A resume with a different configuration is refused instead of mixing results.
    result = toy.invoke("run", "toy", "--quick", "--set", "lr=0.2", "--name", "resumed",
                        "--resume", "--out", tmp_path / "r")
    assert result.exit_code == 2 and "--resume" in result.stderr and "config" in result.stderr


def test_a_dead_worker_fails_its_unit_instead_of_the_sweep():
    from actlab.runner.backends import _result_or_failure
    from actlab.runner.execute import UnitTask

    task = UnitTask("toy", "_toy_experiments", None, {}, {"lr": "1"}, {"act": "relu"}, [3], "abc",
                    "unused")

    def crashed():
        raise RuntimeError("worker process died")

    record = _result_or_failure(crashed, task)
    assert record["status"] == "failed" and record["id"] == "abc" and record["seeds"] == [3]
    assert "worker process died" in record["error"]
    assert _result_or_failure(lambda: {"id": "abc", "status": "ok"}, task)["status"] == "ok"


@pytest.mark.slow
def test_finished_units_are_never_discarded_without_overwrite(tmp_path):
    first = toy.invoke("run", "toy", "--quick", "--out", tmp_path)
    assert first.exit_code == 0, first.output
    run_dir = tmp_path / "toy" / "quick"
    records = sorted(p.read_bytes() for p in (run_dir / "units").glob("*.json"))
    # the same run again without --resume: refused in one line, exit 2, nothing touched
    again = toy.invoke("run", "toy", "--quick", "--out", tmp_path)
    assert again.exit_code == 2, again.output
    assert again.stderr.count("\n") == 1 and "--overwrite" in again.stderr
    assert "4 finished unit(s)" in again.stderr and "Traceback" not in again.output
    assert sorted(p.read_bytes() for p in (run_dir / "units").glob("*.json")) == records
    # a sweep and a reproduction into it are refused the same way
    sweep = toy.invoke("sweep", "toy", "--quick", "--grid", "lr=0.1", "--name", "quick",
                       "--out", tmp_path)
    assert sweep.exit_code == 2 and "--overwrite" in sweep.stderr
    reproduce = toy.invoke("reproduce", "--quick", "--only", "toy", "--out", tmp_path)
    assert reproduce.exit_code == 2 and "--overwrite" in reproduce.stderr
    assert sorted(p.read_bytes() for p in (run_dir / "units").glob("*.json")) == records
    # --overwrite discards them, and says so
    overwritten = toy.invoke("run", "toy", "--quick", "--overwrite", "--out", tmp_path)
    assert overwritten.exit_code == 0 and "discarding 4 finished unit(s)" in overwritten.stderr
    # a directory with failed units only holds nothing finished: no refusal
    for path in (run_dir / "units").glob("*.json"):
        record = json.loads(path.read_text())
        path.write_text(json.dumps({**record, "status": "failed"}))
    assert toy.invoke("run", "toy", "--quick", "--out", tmp_path).exit_code == 0


def test_a_failing_summary_is_one_line_in_the_report_never_a_traceback(tmp_path):
    outcome = run_experiment("toy-broken-summary", "quick", None, None, 1,
                             RunOptions(out=tmp_path, progress=False))
    assert not outcome.ok and "Traceback" in outcome.summary_error  # kept for developers
    status = json.loads((outcome.path / "status.json").read_text())
    assert "Traceback" in status["summary_error"]
    report = (outcome.path / "report.html").read_text()
    assert "summarize failed: ValueError: summary exploded" in report
    assert "Traceback" not in report and "<pre>" not in report



@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_bounded_fields_refuse_non_finite_values_built_directly(value):
    # the CLI's parser refuses them first; a config built in Python is checked the same way
    from actlab.errors import ConfigError
    from actlab.experiments.dead_units import DeadUnitsConfig

    with pytest.raises(ConfigError, match="lr_large") as err:
        DeadUnitsConfig(lr_large=value)
    assert err.value.field == "lr_large"


@pytest.mark.parametrize("name", ["summary.json", "metrics.csv", "config.json", "claims.json",
                                  "status.json"])
@pytest.mark.slow
def test_a_truncated_run_file_is_named_in_one_line(tmp_path, name):
    assert toy.invoke("run", "toy", "--quick", "--out", tmp_path).exit_code == 0
    path = tmp_path / "toy" / "quick" / name
    text = path.read_text()
    path.write_text(text[: text.rindex(",", 0, len(text) // 2) + 1])  # cut inside a row
    result = toy.invoke("report", tmp_path / "toy" / "quick")
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.output
    assert str(path) in result.stderr and "truncated" in result.stderr


def test_report_figures_open_at_full_size_and_tables_scroll_instead_of_overflowing(tmp_path):
    assert toy.invoke("run", "toy", "--quick", "--out", tmp_path).exit_code == 0
    page = (tmp_path / "toy" / "quick" / "report.html").read_text()
    assert '<a href="figures/loss.png"><img src="figures/loss.png"' in page
    style = page[page.index("<style>"):page.index("</style>")]
    assert "overflow-x:auto" in style[style.index("table{"):] and "overflow-wrap:anywhere" in style
