"""The GPT step benchmark runs end to end in its smoke setting and prints consistent figures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "gpt_step.py"


@pytest.mark.slow
def test_smoke_run_prints_both_optimizers_and_their_ratios_as_json_last():
    env = {**os.environ, "PYTHONPATH": str(SCRIPT.parent.parent / "src"), "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, str(SCRIPT), "--smoke"], capture_output=True,
                            text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    figures = json.loads(result.stdout.strip().splitlines()[-1])["smoke"]
    tokens = figures["batch_size"] * figures["block_size"]
    for name in ("adamw", "muon"):
        step = figures[f"{name}_ms_per_step"] / 1e3
        assert step > 0 and figures[f"{name}_update_ms"] > 0
        assert figures[f"{name}_tokens_per_s"] == pytest.approx(tokens / step, rel=1e-9)
    assert figures["muon_over_adamw_step"] == pytest.approx(
        figures["muon_ms_per_step"] / figures["adamw_ms_per_step"], rel=1e-9)
    assert figures["muon_over_adamw_update"] == pytest.approx(
        figures["muon_update_ms"] / figures["adamw_update_ms"], rel=1e-9)
    bad = subprocess.run([sys.executable, str(SCRIPT), "--scales", "huge"], capture_output=True,
                         text=True, env=env, timeout=60)
    assert bad.returncode == 2 and "valid: quick, quick4, default" in bad.stderr
