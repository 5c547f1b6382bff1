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
