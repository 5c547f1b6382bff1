"""``tools/new_experiment.py`` writes a package that runs through the runner as generated."""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from actlab.errors import ConfigError
from actlab.runner.claims import claim_problems
from actlab.runner.driver import RunOptions, run_experiment

TOOL = Path(__file__).resolve().parents[1] / "tools" / "new_experiment.py"
NAME = "gen-probe-tool"  # not a built-in: its module is top-level, outside actlab.experiments
PACKAGE = "gen_probe_tool"


def _tool():
    spec = importlib.util.spec_from_file_location("new_experiment_tool", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """The generated package, imported from a temporary folder on ``sys.path``."""
    root = tmp_path_factory.mktemp("generated")
    tool = _tool()
    folder = tool.create(NAME, into=root, module=PACKAGE)
    sys.path.insert(0, str(root))
    try:
        yield tool, folder, importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(root))


def test_the_package_has_the_three_files_and_a_checked_config(generated):
    _, folder, package = generated
    assert sorted(p.name for p in folder.iterdir()) == ["__init__.py", "claims.py", "summary.py"]
    config = package.GenProbeToolConfig()
    assert config.activations == ("relu", "tanh") and config.init == "he"
    with pytest.raises(ConfigError, match="width: must be >= 1, got 0"):
        package.GenProbeToolConfig(width=0)
    with pytest.raises(ConfigError, match="activations"):
        package.GenProbeToolConfig(activations=("rleu",))
    with pytest.raises(ConfigError, match="activations: needs at least one value"):
        package.GenProbeToolConfig(activations=())


def test_its_units_run_through_the_runner_and_write_summary_and_claims(generated, tmp_path):
    overrides = {"width": 8, "depth": 3, "n_inputs": 16}
    outcome = run_experiment(NAME, "quick", overrides, n_seeds=3,
                             options=RunOptions(out=tmp_path, progress=False))
    assert outcome.ok, outcome.failure_lines()
    summary = json.loads((outcome.path / "summary.json").read_text())
    assert summary["seeds"] == [0, 1, 2] and set(summary["activations"]) == {"relu", "tanh"}
    relu = summary["activations"]["relu"]
    assert len(relu["per_layer"]) == 3 and relu["last_over_first_sd"] is not None
    claims = json.loads((outcome.path / "claims.json").read_text())
    assert [c["id"] for c in claims] == [f"{NAME}/relu/second-moment-kept",
                                         f"{NAME}/tanh/second-moment-kept"]
    assert claim_problems(claims) == []
    # judged over the three seeds: an interval each, and a reason where it is undecided
    assert all(c["n"] == 3 and c["interval"] is not None for c in claims)
    assert all(c["held"] is not None or c["reason"] for c in claims)


def test_names_are_checked_and_nothing_is_overwritten(generated, tmp_path, capsys):
    tool, folder, _ = generated
    for bad in ("My_Study", "study-", "1st", "class"):
        with pytest.raises(ValueError):
            tool.create(bad, into=tmp_path)
    with pytest.raises(FileExistsError):
        tool.create(NAME, into=folder.parent, module=PACKAGE)
    assert tool.main(["other-probe", "--into", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert (tmp_path / "other_probe" / "claims.py").exists()
    for needed in ("tests/test_other_probe.py", "references.json", "quick_claims.json",
                   "unit_times.json", "tests/data/claims/other-probe.json"):
        assert needed in printed
    init = (tmp_path / "other_probe" / "__init__.py").read_text()
    assert "from actlab.experiments.other_probe.summary import" in init
