"""Sweeps: grid points in one run directory, SIGKILL then --resume, process pool."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

import _toy_experiments as toy

# a sweep starts a pool of every core, the SIGKILL test a CLI process too: one xdist worker
# runs these (tests/conftest.py)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("processes")]

SWEEP = ["sweep", "toy", "--quick", "--grid", "lr=0.05,0.1", "--seeds", "2"]


def test_sweep_puts_every_grid_point_in_one_table(tmp_path):
    result = toy.invoke(*SWEEP, "--out", tmp_path)
    assert result.exit_code == 0, result.output
    run_dir = tmp_path / "toy" / "sweep-quick_lr=0.05,0.1"  # documented default name
    lines = (run_dir / "metrics.csv").read_text().splitlines()
    runs = {line.split(",")[0] for line in lines[1:]}
    assert runs == {'"lr=0.05/relu"', '"lr=0.05/tanh"', '"lr=0.1/relu"', '"lr=0.1/tanh"'} or runs == {
        "lr=0.05/relu", "lr=0.05/tanh", "lr=0.1/relu", "lr=0.1/tanh"}
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [p["point"] for p in summary["points"]] == [{"lr": "0.05"}, {"lr": "0.1"}]
    slow, fast = (p["summary"]["final_loss"]["tanh"] for p in summary["points"])
    assert slow != fast  # the grid value reached the units
    assert (run_dir / "figures" / "lr=0.05" / "loss.png").is_file()
    assert (run_dir / "figures" / "lr=0.1" / "loss.png").is_file()
    claims = json.loads((run_dir / "claims.json").read_text())
    assert {c["point"] for c in claims} == {"lr=0.05", "lr=0.1"}


def test_sigkill_mid_sweep_then_resume_gives_the_uninterrupted_table(tmp_path):
    args = [*SWEEP, "--set", "sleep=0.25", "--name", "killed"]
    reference = toy.invoke(*args, "--out", tmp_path / "ref")
    assert reference.exit_code == 0, reference.output
    command = [sys.executable, "-c", "from actlab.cli import main; main()", *args,
               "--out", str(tmp_path / "run")]
    process = subprocess.Popen(command, env=toy.subprocess_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    units_dir = tmp_path / "run" / "toy" / "killed" / "units"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and process.poll() is None:
        if units_dir.exists() and len(list(units_dir.glob("*.json"))) >= 2:
            break
        time.sleep(0.05)
    assert process.poll() is None, process.communicate()
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    run_dir = units_dir.parent
    saved = len(list(units_dir.glob("*.json")))
    assert 2 <= saved < 8 and not (run_dir / "metrics.csv").exists()
    # Resume in a process pool: finished units are skipped, the rest run, same table.
    resumed = toy.invoke(*args, "--out", tmp_path / "run", "--resume", "--workers", "2")
    assert resumed.exit_code == 0, resumed.output
    assert f"{saved} resumed" in resumed.output
    ref_dir = tmp_path / "ref" / "toy" / "killed"
    assert (run_dir / "metrics.csv").read_bytes() == (ref_dir / "metrics.csv").read_bytes()
    assert (run_dir / "summary.json").read_bytes() == (ref_dir / "summary.json").read_bytes()
    assert not list(run_dir.rglob("*.tmp"))
    # Resuming a finished sweep runs nothing and leaves the table as it is.
    again = toy.invoke(*args, "--out", tmp_path / "run", "--resume", "--workers", "2")
    assert again.exit_code == 0 and "8 resumed" in again.output
    assert (run_dir / "metrics.csv").read_bytes() == (ref_dir / "metrics.csv").read_bytes()
