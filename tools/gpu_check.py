"""The prepared check for a GPU machine: run the CUDA tests, print one JSON line of results.

Runs where the only Python is a bare ``python3`` with torch and the scientific stack, with no
network and no virtual environment: ``make gpu-check`` calls it with ``PYTHONPATH=src``.
Tests whose optional extras are missing (Ray, the MiniLM package) skip themselves.
Exit status: 0 when no test failed, 1 otherwise.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent


class _Tally:
    """A pytest plugin that counts outcomes and keeps the first line of each failure."""

    def __init__(self) -> None:
        self.counts = {"passed": 0, "failed": 0, "skipped": 0}
        self.failures: list[dict[str, str]] = []
        self.durations: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:  # noqa: D102
        if report.when == "call" or report.outcome != "passed":
            self.durations[report.nodeid] = self.durations.get(report.nodeid, 0.0) + report.duration
        if report.when == "call" and report.passed:
            self.counts["passed"] += 1
        elif report.failed:
            self.counts["failed"] += 1
            message = str(report.longrepr).strip().splitlines()
            self.failures.append({"test": report.nodeid, "error": message[-1][:300] if message else ""})
        elif report.skipped:
            self.counts["skipped"] += 1


def main(argv: list[str]) -> int:
    """Run ``pytest -m cuda`` on the test suite and print the JSON summary line."""
    tally = _Tally()
    start = time.perf_counter()
    code = pytest.main(["-q", "-m", "cuda", "-p", "no:cacheprovider", str(ROOT / "tests"), *argv],
                       plugins=[tally])
    seconds = time.perf_counter() - start
    slowest = sorted(tally.durations.items(), key=lambda kv: -kv[1])[:5]
    summary = {
        "gpu_check_passed": code == 0 and tally.counts["failed"] == 0,
        "cuda_available": torch.cuda.is_available(),
        "device_name": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "torch": torch.__version__,
        **tally.counts,
        "seconds": round(seconds, 1),
        "slowest_tests": {name: round(s, 1) for name, s in slowest},
        "failures": tally.failures,
    }
    print(json.dumps(summary))
    return 0 if summary["gpu_check_passed"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
