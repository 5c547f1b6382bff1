"""Claims are addressable: ids, values and comparisons that agree with the verdicts.

The per-experiment checks read ``tests/data/claims/<experiment>.json``: the summary of a
``--quick`` run and the verdict (by claim id) the claims gave on it when it was recorded,
so a change of a claim's judgement shows up here, claim by claim; a change of wording does
not.
"""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path

import pytest

import actlab.experiments
from actlab.runner.atomic import dumps
from actlab.runner.claims import (
    ID_PATTERN,
    claim_id,
    claim_problems,
    compare,
    largest_gap,
    slug,
)
from actlab.runner.experiment import Claim, get_experiment, list_experiments

DATA = Path(__file__).parent / "data" / "claims"
RECORDED = sorted(p.stem for p in DATA.glob("*.json"))


def test_slug_and_id_are_kebab_case():
    assert slug("leaky_relu-lr4") == "leaky-relu-lr4"
    assert slug("tanh-xavier-5/3") == "tanh-xavier-5-3"
    assert slug("relu-1.41he") == "relu-1.41he"
    assert slug("lr 0.001") == "lr-0.001"
    cid = claim_id("teacher-student", "relu", "shifted ends lower")
    assert cid == "teacher-student/relu/shifted-ends-lower" and ID_PATTERN.match(cid)
    for bad in ("Teacher/relu/x", "teacher-student", "a//b", "a/b-", "a/b c"):
        assert not ID_PATTERN.match(bad), bad


@pytest.mark.parametrize("op", ["<", "<=", ">", ">="])
def test_compare_matches_python_operators(op):
    import operator

    fn = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}[op]
    for a in (-1.0, 0.0, 0.5, 1.0):
        for b in (-1.0, 0.0, 0.5):
            assert compare(a, op, b) == fn(a, b)


def test_compare_within_and_undecided_cases():
    assert compare(4.26, "within", 0.3, reference=4.3) is True
    assert compare(4.7, "within", 0.3, reference=4.3) is False
    assert compare(0.3, "within-factor", 3.0, reference=0.102) is True
    assert compare(0.31, "within-factor", 3.0, reference=0.102) is False
    assert compare(0.034, "within-factor", 3.0, reference=0.102) is True
    assert compare(None, "<", 1.0) is None
    assert compare(math.nan, "<", 1.0) is None
    assert compare(1.0, "all-of", 2.0) is None  # judged through its Check, not its main number
    with pytest.raises(ValueError, match="unknown comparison"):
        compare(1.0, "compound", 2.0)  # retired: every claim is judged by the runner
    assert compare(1.0, "within", 2.0) is None  # no reference: undecided
    with pytest.raises(ValueError, match="comparison"):
        compare(1.0, "<<", 2.0)


def test_claim_problems_finds_bad_ids_repeats_and_contradictions():
    good = Claim("x falls", "1 -> 0.5", True, "s", id="toy/relu/x-falls", value=0.5,
                 comparison="<", threshold=1.0)
    assert claim_problems([good]) == []
    wrong = Claim("x falls", "1 -> 2", True, "s", id="toy/relu/other", value=2.0,
                  comparison="<", threshold=1.0)
    problems = claim_problems([good, good, wrong, Claim("y", "", None, id="Bad Id")])
    assert any("repeated" in p for p in problems)
    assert any("toy/relu/other" in p and "held=True" in p for p in problems)
    assert any("'Bad Id'" in p for p in problems)
    # A repeated id at another grid point of a sweep is a different claim.
    rows = [{**json.loads(dumps(good)), "point": p} for p in ("lr=0.1", "lr=0.2")]
    assert claim_problems(rows) == []


def test_claim_numbers_are_floats_and_held_a_bool():
    import numpy as np

    claim = Claim("c", "m", np.bool_(True), id="a/b/c", value=np.float32(0.25), threshold=1)
    assert claim.held is True and isinstance(claim.value, float) and claim.threshold == 1.0
    assert json.loads(dumps(claim))["value"] == 0.25


def test_largest_gap_is_the_max_abs_difference_and_nan_is_infinite():
    pairs = (([1.0, 2.0], [1.0, 2.5]), ([3.0], [2.9]))
    assert largest_gap(*pairs) == pytest.approx(max(abs(a - b) for m, p in pairs
                                                    for a, b in zip(m, p)))
    assert largest_gap(([0.0, math.nan], [0.0, 1.0])) == math.inf
    with pytest.raises(ValueError):
        largest_gap(([1.0, 2.0], [1.0]))


def _claim_calls(path: Path) -> list[ast.Call]:
    tree = ast.parse(path.read_text())
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call)
            and getattr(node.func, "id", None) in ("Claim", "ClaimSpec")]


def test_every_claim_site_of_the_experiments_names_an_id():
    folder = Path(actlab.experiments.__file__).parent
    sites = {str(p.relative_to(folder)): _claim_calls(p) for p in sorted(folder.rglob("*.py"))}
    assert sum(len(calls) for calls in sites.values()) >= 80  # some specs are built in loops
    for name, calls in sites.items():
        for call in calls:
            keywords = {k.arg for k in call.keywords}
            assert "id" in keywords, f"{name}:{call.lineno} Claim without id"


def test_recorded_summaries_are_of_registered_experiments():
    assert len(RECORDED) >= 17  # more are added as quick runs of the older code are recorded
    assert set(RECORDED) <= set(list_experiments())


@pytest.mark.parametrize("name", RECORDED)
def test_claims_have_unique_ids_consistent_values_and_recorded_verdicts(name):
    recorded = json.loads((DATA / f"{name}.json").read_text())
    experiment = get_experiment(name)
    claims = [json.loads(dumps(c)) for c in experiment.claims(recorded["summary"])]
    assert claim_problems(claims) == []
    assert all(c["id"].startswith(f"{name}/") for c in claims)
    assert [(c["id"], c["held"]) for c in claims] == [tuple(v) for v in recorded["verdicts"]]
    decided = [c for c in claims if c["comparison"] in ("<", "<=", ">", ">=", "within",
                                                        "within-factor")]
    for claim in decided:
        assert claim["value"] is None or isinstance(claim["value"], float)
        assert claim["threshold"] is not None, claim["id"]
