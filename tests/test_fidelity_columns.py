"""docs/fidelity.md's paper column holds the documents' numbers only; our predictions have a
column of their own, and released code is cited without a text to check numbers against."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from actlab.runner.atomic import dumps
from actlab.runner.claims import ClaimSpec, within

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("fidelity_tool", ROOT / "tools" / "fidelity.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(claim) -> dict:
    return json.loads(dumps(claim))


def test_the_paper_column_shows_quoted_numbers_and_predictions_go_apart(tool):
    n = {"measured": 56.0, "theory": 63.29, "paper_theory": 77.45, "paper_full": 76.25}
    claim = ClaimSpec(
        id="teacher-student/relu/initial-angle-matches-theory",
        text="angle",
        measured="m",
        check=within(n["measured"], n["theory"], 10.0),
        source="rethinking",
        where="App. B.2, Table 2",
        numbers=n,
        quoted=("paper_theory", "paper_full"),
        predicted=("theory",),
    ).judge()
    quick = {claim.id: _row(claim)}
    (row,) = tool.rows(quick, {}, {})
    header = [
        "claim id",
        "statement",
        "source",
        "number quoted",
        "our prediction",
        "quick",
        "reference",
        "diagnosis",
    ]
    cells = dict(zip(header, row, strict=True))
    assert cells["number quoted"] == "77.45, 76.25"
    assert cells["our prediction"] == "63.29"
    assert "63.29" not in cells["number quoted"]
    assert "| number quoted | our prediction |" in tool.render()


def test_released_code_is_not_matched_to_a_document(tool, tmp_path):
    # A folder holding the long paper's text: the code source shares its title but must not
    # borrow its text, and is not reported as a missing document either.
    (tmp_path / "a.txt").write_text("Bug or Feature2: Weight Drift and Activation Sparsity\n...")
    documents = tool.load_documents(tmp_path)
    assert "bug-or-feature" in documents and "bug-or-feature-code" not in documents


def test_a_claim_only_an_evidence_run_judges_gets_a_row_naming_that_run(tool):
    n = {"block": 1.0, "bar": 4.0, "paper_last": 4.0}
    claim = ClaimSpec(
        id="spikes/12-layers-relu/spike-in-first-third",
        text="early",
        measured="block {block:g}",
        check=within(n["block"], 1.0, 3.0),
        source="bug-or-feature",
        where="§6",
        numbers=n,
        quoted=("paper_last",),
    ).judge()
    other = {**_row(claim), "held": False, "interval": [0.5, 1.5], "point": "lr=0.1"}
    evidence = {claim.id: [("evidence-arms", _row(claim)), ("evidence-sweep", other)]}
    references = {"spikes": {"status": "reference", "claims": {}}}
    (row,) = tool.rows({}, references, {}, evidence)
    cells = dict(zip(["id", "statement", "source", "quoted", "predicted", "quick", "reference",
                      "diagnosis"], row, strict=True))
    assert cells["quick"] == "—"  # no quick claim: the evidence's verdict is not put there
    assert cells["statement"] == "early" and cells["quoted"] == "4"
    assert cells["reference"].startswith("not in the reference run; evidence-arms: ")
    assert "; evidence-sweep (lr=0.1): " in cells["reference"]
    assert "not held" in cells["reference"].split("evidence-sweep")[1]
    # a miss in an evidence run asks for a diagnosis like a reference miss does
    assert cells["diagnosis"] == "**open**: no diagnosis yet"
    (row,) = tool.rows({}, references, {claim.id: {"kind": "scale", "text": "short"}}, evidence)
    assert row[-1] == "**scale**: short"
