"""The experiment layer's shape: one package per experiment over shared recipes.

Every built-in experiment is a package of ``actlab.experiments`` with ``__init__``,
``summary`` and ``claims`` (``figures`` where it draws); nothing else lives directly in that
folder; no package re-exports through ``noqa: F401`` facades or reaches into another
experiment's private names; ``train/`` holds the engine, not recipes or measurements.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

import actlab.experiments
from actlab.runner.experiment import list_experiments
from actlab.runner.fields import CheckedConfig

FOLDER = Path(actlab.experiments.__file__).parent
SRC = FOLDER.parent
BUILT_IN = {n: c for n, c in list_experiments().items()
            if c.__module__.startswith("actlab.experiments")}


# Modules a family of experiments shares (its summaries, figures or paper presets), beside
# its packages: the DiT pair's summaries, and the --paper presets that several experiments
# build on (CIFAR-10 classifiers, ImageNet models, GPT-2/GPT-nano, DiT-B/2 and S/2).
FAMILY_MODULES = ["classifier_paper.py", "dit_common.py", "dit_paper.py", "imagenet_paper.py",
                  "lm_paper.py"]


def test_only_packages_live_under_experiments():
    modules = sorted(p.name for p in FOLDER.glob("*.py") if p.name != "__init__.py")
    assert modules == FAMILY_MODULES
    packages = sorted(p.name for p in FOLDER.iterdir() if (p / "__init__.py").exists())
    assert len(packages) == len(BUILT_IN) >= 23


@pytest.mark.parametrize("name", sorted(BUILT_IN))
def test_each_experiment_is_a_package_with_summary_and_claims(name):
    cls = BUILT_IN[name]
    package = FOLDER / cls.__module__.rsplit(".", 1)[-1]
    assert cls.__module__.count(".") == 2, cls.__module__  # defined in the package's __init__
    assert {"__init__.py", "summary.py", "claims.py"} <= {p.name for p in package.glob("*.py")}
    assert issubclass(cls.Config, CheckedConfig) and dataclasses.is_dataclass(cls.Config)


def _imports(path: Path, runtime_only: bool = False) -> list[tuple[str, list[str]]]:
    tree = ast.parse(path.read_text())
    if runtime_only:  # drop `if TYPE_CHECKING:` blocks (type hints import without a cycle)
        tree.body = [n for n in tree.body if not (isinstance(n, ast.If)
                                                  and getattr(n.test, "id", "") == "TYPE_CHECKING")]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
    return out


def test_no_facades_and_no_private_names_across_experiments():
    offenders = []
    for path in sorted(FOLDER.rglob("*.py")):
        text = path.read_text()
        if "noqa: F401" in text:
            offenders.append(f"{path.relative_to(SRC)}: re-export facade")
        own = path.relative_to(FOLDER).parts[0]
        for module, names in _imports(path):
            parts = module.split(".")
            if parts[:2] != ["actlab", "experiments"] or len(parts) < 3:
                continue
            private = [n for n in names if n.startswith("_")] + [p for p in parts if p.startswith("_")]
            if parts[2] != own and private:
                offenders.append(f"{path.relative_to(SRC)}: {module} {private}")
    assert not offenders, offenders


def test_submodules_do_not_import_their_own_package_init():
    offenders = []
    for path in sorted(FOLDER.glob("*/*.py")):
        if path.name == "__init__.py":
            continue
        package = f"actlab.experiments.{path.parent.name}"
        offenders += [f"{path.relative_to(SRC)}" for module, _ in _imports(path, runtime_only=True)
                      if module == package]
    assert not offenders, offenders


def test_train_keeps_the_engine_only():
    names = {p.stem for p in (SRC / "train").glob("*.py")}
    assert not names & {"classify", "lm", "binary"}  # moved to recipes
    for path in sorted((SRC / "train").glob("*.py")):
        for module, _ in _imports(path):
            assert not module.startswith(("actlab.experiments", "actlab.recipes")), (path, module)


def test_claims_are_data_judged_by_the_runner_and_name_their_documents():
    # No experiment builds a Claim by hand (its held would be the experiment's), no
    # "compound" comparison survives, and no document is called by its file number.
    offenders = []
    for path in sorted(FOLDER.rglob("*.py")):
        text = path.read_text()
        tree = ast.parse(text)
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
                 and getattr(n.func, "id", None) == "Claim"]
        offenders += [f"{path.relative_to(SRC)}:{c.lineno} Claim(...)" for c in calls]
        if '"compound"' in text:
            offenders.append(f"{path.relative_to(SRC)}: compound")
    for path in sorted(SRC.rglob("*.py")):
        if re.search(r"[Ss]eed 00\d", path.read_text()):
            offenders.append(f"{path.relative_to(SRC)}: a document called by number")
    assert not offenders, offenders
