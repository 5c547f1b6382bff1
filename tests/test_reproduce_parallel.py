"""``actlab reproduce`` scheduling all experiments' units in one pool, longest first."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from actlab.runner import reproduce as rep
from actlab.runner.backends import run_indexed
from actlab.runner.driver import RunOptions
from actlab.runner.experiment import STATUS_FAILED, STATUS_OK, get_experiment
from actlab.runner.plan import make_plan

import _toy_experiments as toy

# Cheap real experiments (a few seconds of CPU each at quick scale) with 1, 1 and 6 units.
CHEAP = "worked-example,gallery,pitfalls"
CLOCK = re.compile(r"(elapsed|seconds|wall|clock|duration|per_s$|_s$)", re.IGNORECASE)


def _without_clocks(value):
    """``value`` with every mapping entry whose key names a time measurement dropped."""
    if isinstance(value, dict):
        return {k: _without_clocks(v) for k, v in value.items() if not CLOCK.search(str(k))}
    if isinstance(value, list):
        return [_without_clocks(v) for v in value]
    return value


def _summaries(out: Path) -> dict[str, object]:
    return {p.parent.parent.name: _without_clocks(json.loads(p.read_text()))
            for p in sorted(out.glob("*/quick/summary.json"))}


@pytest.mark.xdist_group("processes")  # a pool of 2 workers (tests/conftest.py)
@pytest.mark.slow
def test_one_and_two_workers_give_bit_identical_summaries(tmp_path):
    one = toy.invoke("reproduce", "--quick", "--only", CHEAP, "--workers", "1", "--out", tmp_path / "w1")
    assert one.exit_code == 0, one.output
    two = toy.invoke("reproduce", "--quick", "--only", CHEAP, "--workers", "2", "--out", tmp_path / "w2")
    assert two.exit_code == 0, two.output
    first, second = _summaries(tmp_path / "w1"), _summaries(tmp_path / "w2")
    assert sorted(first) == sorted(CHEAP.split(","))
    assert all(first[name] for name in first)  # something numeric is actually compared
    for name in first:  # json round trip keeps every float's exact bits
        assert first[name] == second[name], name
    # Some experiments (teacher-student) change in the last bits with the thread count, too
    # slow for this test: check that both runs gave their units the same count instead.
    for run in ("w1", "w2"):
        env = json.loads((tmp_path / run / "pitfalls" / "quick" / "env.json").read_text())
        assert env["torch_threads"] == rep.UNIT_THREADS, run


def _units_of(name: str) -> list[str]:
    return [u.id for u in make_plan(get_experiment(name), "quick", None, {}, None).units]


def test_estimates_use_recorded_ids_then_the_experiments_mean_then_the_median():
    ids = _units_of("toy")
    table = {"toy": {ids[0]: 30.0, ids[1]: 10.0}, "other": {"x": 2.0}, "third": {"y": 4.0}}

    class Run:  # only .tasks[*].unit_id is read
        def __init__(self, uids):
            self.tasks = [type("T", (), {"unit_id": u})() for u in uids]

    estimates = rep.unit_estimates({"toy": Run(ids + ["changed"]), "new": Run(["z"])}, table)
    assert estimates["toy"] == [30.0, 10.0, 20.0, 20.0, 20.0]  # unknown ids: toy's mean
    assert estimates["new"] == [4.0]  # median of the means 20, 2 and 4
    assert rep.unit_estimates({"new": Run(["z"])}, {}) == {"new": [rep.FALLBACK_UNIT_S]}


def test_the_committed_table_names_registered_experiments_and_their_current_units():
    table = rep.load_unit_times()
    assert table, "src/actlab/runner/unit_times.json is missing or unreadable"
    assert set(table) <= set(rep.list_experiments())
    known = sum(uid in table[name] for name in table
                for uid in _units_of(name))
    assert known >= 0.9 * sum(len(t) for t in table.values())  # still matches today's plans
    assert rep.load_unit_times(Path("no/such/file.json")) == {}


@pytest.fixture
def scheduled(tmp_path, monkeypatch):
    """Reproduce the toys with a made-up table, recording the order units ran in and which
    summaries existed after each unit; units run in-process in the queue's order."""
    ids = _units_of("toy")
    ens = _units_of("toy-ensemble")
    table = {"toy": dict(zip(ids, (5.0, 1.0, 3.0, 2.0))), "toy-ensemble": dict(zip(ens, (4.0, 0.5)))}
    monkeypatch.setattr(rep, "load_unit_times", lambda: table)
    events: list[tuple[str, set[str]]] = []

    def fake_pool(tasks, on_done, workers, configs):
        def record(i, result):
            on_done(i, result)
            done = {p.parent.parent.name for p in tmp_path.glob("*/quick/summary.json")}
            events.append((table_time(tasks[i]), done))

        def table_time(task):  # a unit works in OUT, EXPERIMENT, quick, "work", UNIT_ID
            return table[Path(task.workdir).parts[-4]][task.unit_id]

        run_indexed(tasks, record, 1, configs)

    monkeypatch.setattr(rep, "run_indexed", fake_pool)
    lines: list[str] = []
    outcome = rep.reproduce("quick", ["toy", "toy-ensemble"], RunOptions(out=tmp_path, workers=2),
                            echo=lines.append)
    return outcome, events, lines, tmp_path


def test_units_start_longest_first_and_each_experiment_finishes_at_its_last_unit(scheduled):
    outcome, events, lines, out = scheduled
    assert [t for t, _ in events] == [5.0, 4.0, 3.0, 2.0, 1.0, 0.5]
    finished_after = [done for _, done in events]
    assert finished_after[3] == set()  # each toy still has a unit to go
    assert finished_after[4] == {"toy"}  # toy's last unit (1.0) was the fifth
    assert finished_after[5] == {"toy", "toy-ensemble"}
    assert [e["status"] for e in outcome.entries] == ["ok", "ok"]
    assert "2 worker(s), longest first" in lines[0]
    assert [line.split(" ")[1] for line in lines[1:]] == ["toy", "toy-ensemble"]
    times = json.loads((out / rep.UNIT_TIMES_FILE).read_text())
    assert sorted(times["experiments"]) == ["toy", "toy-ensemble"]
    assert len(times["experiments"]["toy"]) == 4 and times["scale"] == "quick"


def test_resume_runs_nothing_and_rewrites_every_report(scheduled, monkeypatch):
    _, _, _, out = scheduled
    report = out / "toy" / "quick" / "report.html"
    report.unlink()
    ran: list[int] = []
    monkeypatch.setattr(rep, "run_indexed", lambda tasks, *a: ran.append(len(tasks)))
    outcome = rep.reproduce("quick", ["toy", "toy-ensemble"],
                            RunOptions(out=out, workers=2, resume=True), echo=lambda _: None)
    assert ran == [0] and report.exists()
    assert [e["status"] for e in outcome.entries] == ["ok", "ok"]
    assert "toy/quick/report.html" in (out / "index.html").read_text()


@pytest.mark.xdist_group("processes")  # a pool of 2 workers (tests/conftest.py)
@pytest.mark.slow
def test_a_unit_that_kills_its_worker_fails_alone(tmp_path):
    result = toy.invoke("run", "toy", "--quick", "--set", "crash_act=tanh", "--set", "acts=relu,tanh,sigmoid",
                        "--workers", "2", "--out", tmp_path)
    assert result.exit_code == 1
    records = [json.loads(p.read_text()) for p in (tmp_path / "toy").glob("*/units/*.json")]
    status = {(r["unit"]["act"], tuple(r["seeds"])): r["status"] for r in records}
    assert len(status) == 6
    assert {k: v for k, v in status.items() if k[0] == "tanh"} == {("tanh", (0,)): STATUS_FAILED,
                                                                   ("tanh", (1,)): STATUS_FAILED}
    assert all(v == STATUS_OK for k, v in status.items() if k[0] != "tanh")


def test_reproduce_defaults_to_every_core_on_the_cpu_and_says_so_in_help():
    assert rep.default_workers("cpu") == (os.cpu_count() or 1)
    assert rep.default_workers("cuda") == 1
    help_text = toy.invoke("reproduce", "--help").output
    assert "longest first" in help_text and "number of cores" in help_text
    assert toy.invoke("reproduce", "--workers", "0", "--only", "toy").exit_code == 2


def test_a_pool_that_breaks_between_units_reruns_the_suspects_and_runs_the_rest(monkeypatch):
    # The pool can break after `wait` returned (a worker died meanwhile): the next submit then
    # raises. No unit may be lost: the unit not yet submitted goes back to the queue.
    from concurrent.futures import Future
    from concurrent.futures.process import BrokenProcessPool

    import actlab.runner.backends as backends

    pools: list[int] = []

    class FlakyPool:
        def __init__(self, workers: int, threads: int) -> None:
            self.first = not pools
            self.submits = 0
            pools.append(workers)

        def __enter__(self):
            return self

        def __exit__(self, *exc) -> None:
            return None

        def submit(self, fn, task):
            self.submits += 1
            if self.first and self.submits == 3:
                raise BrokenProcessPool("a worker died")
            future: Future = Future()
            future.set_result({"id": task, "status": STATUS_OK})
            return future

    monkeypatch.setattr(backends, "_pool", FlakyPool)
    monkeypatch.setattr(backends, "threads_per_worker", lambda workers: 1)
    done: dict[int, str] = {}
    run_indexed(["a", "b", "c", "d", "e"], lambda i, r: done.setdefault(i, r["id"]), workers=2)
    assert done == {0: "a", 1: "b", 2: "c", 3: "d", 4: "e"}
    assert len(pools) >= 2  # a fresh pool took over after the break
