"""``import actlab`` is cheap (no torch) and reaches every public submodule lazily."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")


def _run(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=300)


def test_import_actlab_does_not_import_torch_and_reaches_submodules() -> None:
    code = """
import sys, types
import actlab
assert "torch" not in sys.modules, "import actlab imported torch"
assert "actlab.theory" not in sys.modules
m = actlab.theory.moments("silu")            # the example of the issue
assert abs(m.mean - 0.2066) < 1e-3, m
for name in ("theory", "nn", "curvature", "probe", "train", "data", "runner", "surgery", "hf",
             "analysis", "init", "activations", "experiments", "measure", "profile", "errors"):
    assert isinstance(getattr(actlab, name), types.ModuleType), name
    assert name in dir(actlab), name
assert callable(actlab.register_metric) and callable(actlab.measure_once)
assert callable(actlab.profile_model)
try:
    actlab.no_such_thing
except AttributeError as exc:
    assert "no_such_thing" in str(exc)
else:
    raise AssertionError("no AttributeError")
print("ok")
"""
    result = _run(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
