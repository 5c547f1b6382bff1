"""The README's example claims.json row is a real row of a committed reference, and stays so."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_readme_claim_row_matches_the_committed_reference():
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```json\n(\{\"id\": .*?\})\n```", readme, re.S)
    assert block, "the README shows no claims.json row"
    row = json.loads(block.group(1))
    experiment = row["id"].split("/", 1)[0]
    kept = json.loads((ROOT / "docs" / "results" / experiment / "claims.json").read_text())
    (claim,) = [c for c in kept if c["id"] == row["id"]]
    assert row["held"] == claim["held"] and row["n"] == claim["n"]
    assert row["comparison"] == claim["comparison"] and row["claim"] == claim["claim"]
    for key in ("value", "threshold"):
        assert row[key] == pytest.approx(claim[key], rel=1e-3)
    assert row["interval"] == pytest.approx(claim["interval"], rel=1e-3)
