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


# The command group imports click and its commands when imported: it is no library package.
NOT_EXPORTING = {"actlab.cli"}


def _packages() -> list[str]:
    """``actlab`` and its top-level subpackages (the experiments' own packages are plugins)."""
    root = Path(SRC) / "actlab"
    found = ["actlab"] + [f"actlab.{p.parent.name}" for p in sorted(root.glob("*/__init__.py"))]
    return [name for name in found if name not in NOT_EXPORTING]


def test_every_package_exports_lazily_without_torch() -> None:
    # Importing every package, one after another, loads no torch; then every name of every
    # package's __all__ resolves, comes from the package's own modules and shadows no module.
    code = f"""
import importlib, pkgutil, sys
packages = {_packages()!r}
for name in packages:
    importlib.import_module(name)
    assert "torch" not in sys.modules, f"import {{name}} imported torch"
for name in packages:
    package = sys.modules[name]
    exports = package.__getattr__.exports  # written with actlab._lazy.lazy_exports
    assert set(exports) <= set(package.__all__) <= set(dir(package)), name
    submodules = {{info.name for info in pkgutil.iter_modules(package.__path__)}}
    assert not set(exports) & submodules, (name, set(exports) & submodules)
    for export, (module, attribute) in exports.items():
        assert name == "actlab" or module.startswith(name + "."), (name, export, module)
        assert getattr(package, export) is getattr(importlib.import_module(module), attribute)
    for export in package.__all__:
        getattr(package, export)
    for sub in submodules - {{s for s in submodules if s.startswith("_")}}:
        assert sub in dir(package), (name, sub)
# optional dependencies load when used, not when their actlab modules are imported
import actlab.measure.vae, actlab.recipes.dit_quality
assert "diffusers" not in sys.modules, "importing actlab imported diffusers"
print("ok", len(packages))
"""
    result = _run(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"ok {len(_packages())}"


def test_from_package_import_name_works_for_the_engine() -> None:
    code = """
from actlab.train import Trainer, TrainSettings, EnsembleTrainer
from actlab.data import load_digits
from actlab.runner import Experiment, UnitResult
from actlab.recipes import train_students
from actlab.measure import signal_profile
from actlab.theory import gaussian            # a submodule, through the package
import actlab.train.loop
assert Trainer is actlab.train.loop.Trainer
assert gaussian.moments("relu").mean > 0
print("ok")
"""
    result = _run(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
