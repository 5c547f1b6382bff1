"""The Ray backend on a local Ray instance gives the same table as the local backend."""

from __future__ import annotations

import json

import pytest

import _toy_experiments as toy

ray = pytest.importorskip("ray", reason="the ray extra is not installed")

pytestmark = [pytest.mark.slow,
              pytest.mark.xdist_group("processes")]  # a Ray instance (tests/conftest.py)

ARGS = ["sweep", "toy", "--quick", "--grid", "lr=0.05,0.1", "--seeds", "2",
        "--set", "acts=relu,tanh,sigmoid", "--set", "fail_act=sigmoid", "--set", "diverge_act=relu"]


@pytest.fixture(scope="module")
def local_ray():
    """One small local Ray instance for the module (Ray start-up is slow)."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()


def test_ray_backend_matches_local_backend(tmp_path, local_ray):
    on_ray = toy.invoke(*ARGS, "--backend", "ray", "--out", tmp_path / "ray")
    local = toy.invoke(*ARGS, "--backend", "local", "--out", tmp_path / "local")
    assert on_ray.exit_code == 1 and local.exit_code == 1  # the sigmoid units fail on both
    assert "boom in sigmoid" in on_ray.stderr
    name = "sweep-quick_acts=relu,tanh,sigmoid_fail_act=sigmoid_diverge_act=relu_lr=0.05,0.1"
    ray_dir, local_dir = tmp_path / "ray" / "toy" / name, tmp_path / "local" / "toy" / name
    assert (ray_dir / "metrics.csv").read_bytes() == (local_dir / "metrics.csv").read_bytes()
    assert (ray_dir / "summary.json").read_bytes() == (local_dir / "summary.json").read_bytes()
    status = json.loads((ray_dir / "status.json").read_text())
    assert status["units"] == {"ok": 4, "diverged": 4, "failed": 4}
    assert len((ray_dir / "metrics.csv").read_text().splitlines()) > 1
