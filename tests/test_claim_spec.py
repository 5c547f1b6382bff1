"""Claims as data: every operator and combinator against hand-computed cases, preconditions,
text templates, the JSON round trip and the consistency check that re-judges claims.json."""

from __future__ import annotations

import json
import math

import pytest

from actlab.runner.atomic import dumps
from actlab.runner.claims import (
    Check,
    ClaimSpec,
    all_of,
    among,
    any_of,
    check_from_dict,
    claim_problems,
    fill,
    ge,
    gt,
    le,
    lt,
    within,
    within_factor,
)
from actlab.runner.sources import OURS, SOURCES, cite, source

NAN = float("nan")


@pytest.mark.parametrize("test, expected", [
    (lt(1.0, 2.0), True), (lt(2.0, 2.0), False), (le(2.0, 2.0), True), (le(2.1, 2.0), False),
    (gt(3.0, 2.0), True), (gt(2.0, 2.0), False), (ge(2.0, 2.0), True), (ge(1.9, 2.0), False),
    (within(0.70, 0.62, 0.10), True), (within(0.73, 0.62, 0.10), False),
    (within(0.52, 0.62, 0.10), True), (within(0.51, 0.62, 0.10), False),
    (within_factor(4.0, 2.0, 2.0), True), (within_factor(1.0, 2.0, 2.0), True),
    (within_factor(0.99, 2.0, 2.0), False), (within_factor(4.01, 2.0, 2.0), False),
    (among("relu", ["relu", "gelu"]), True), (among("tanh", ["relu", "gelu"]), False),
])
def test_each_operator_on_hand_computed_cases(test, expected):
    assert test.verdict() is expected


@pytest.mark.parametrize("test", [lt(None, 1.0), lt(1.0, None), gt(NAN, 0.0), ge(1.0, math.inf),
                                  within(NAN, 0.5, 0.1), among(None, ["a"])])
def test_a_missing_or_non_finite_number_leaves_a_test_undecided(test):
    assert test.verdict() is None


def test_combinators_are_three_valued():
    yes, no, unknown = lt(0.0, 1.0), lt(2.0, 1.0), lt(NAN, 1.0)
    assert all_of(yes, yes).verdict() is True
    assert all_of(yes, no).verdict() is False
    assert all_of(unknown, no).verdict() is False  # a failure settles all-of
    assert all_of(yes, unknown).verdict() is None
    assert any_of(no, yes).verdict() is True
    assert any_of(unknown, yes).verdict() is True  # a success settles any-of
    assert any_of(no, no).verdict() is False
    assert any_of(no, unknown).verdict() is None
    nested = all_of(yes, any_of(no, within(0.5, 0.45, 0.1)))
    assert nested.verdict() is True
    assert [leaf.value for leaf in nested.leaves()] == [0.0, 2.0, 0.5]


def test_bad_tests_are_refused():
    with pytest.raises(ValueError, match="unknown operator"):
        Check("~", 1.0, 2.0)
    with pytest.raises(ValueError, match="needs a reference"):
        Check("within", 1.0, 0.1)
    with pytest.raises(ValueError, match="needs allowed labels"):
        Check("in", "relu")
    with pytest.raises(ValueError, match="at least one"):
        all_of()


def test_templates_fill_each_number_once_and_write_missing_ones_as_na():
    assert fill("{p:.0%} after {n} epochs", {"p": 0.62, "n": 30}) == "62% after 30 epochs"
    assert fill("{x:.3f} and {y:.2f}", {"x": None, "y": NAN}) == "n/a and n/a"
    with pytest.raises(ValueError, match="lacks|lack"):
        fill("{missing}", {})


def _spec(**kw):
    numbers = {"published": 0.62, "tol": 0.15, "m1": 0.58, "m30": 0.71}
    base = dict(id="dead-units/relu-lr4/dead-share-matches-handbook",
                text="loses {published:.0%} of its units (tolerance {tol:.0%}; more later)",
                measured="{m1:.1%} and {m30:.1%}",
                check=all_of(within(numbers["m1"], numbers["published"], numbers["tol"]),
                            ge(numbers["m30"], numbers["m1"])),
                source="handbook", where="Dead ReLUs", numbers=numbers, quoted=("published",))
    return ClaimSpec(**{**base, **kw})


def test_the_runner_computes_held_and_fills_the_claim():
    claim = _spec().judge()
    assert claim.held is True
    assert claim.claim == "loses 62% of its units (tolerance 15%; more later)"
    assert claim.measured == "58.0% and 71.0%"
    assert (claim.value, claim.threshold, claim.reference) == (0.58, 0.15, 0.62)
    assert claim.comparison == "all-of" and claim.source_key == "handbook"
    assert claim.source == cite("handbook", "Dead ReLUs")
    failing = _spec(check=all_of(within(0.40, 0.62, 0.15), ge(0.71, 0.40))).judge()
    assert failing.held is False


def test_a_failed_precondition_leaves_the_claim_undecided():
    claim = _spec(undecided_because="one seed: the spread is unknown").judge()
    assert claim.held is None and claim.precondition.startswith("one seed")


def test_a_categorical_claim_has_no_number():
    claim = _spec(check=among("relu-he", ["relu-he", "leaky-he"]), measured="best: relu-he").judge()
    assert claim.held is True and claim.value is None and claim.comparison == "in"


def test_claims_json_round_trip_is_re_judged_by_claim_problems():
    row = json.loads(dumps(_spec().judge()))
    assert check_from_dict(row["check"]).verdict() is True
    assert claim_problems([row]) == []
    forged = {**row, "held": False}
    assert any("held=False" in p for p in claim_problems([forged]))
    undecided = json.loads(dumps(_spec(undecided_because="too few seeds").judge()))
    assert claim_problems([undecided]) == []
    assert claim_problems([{**undecided, "held": True}])


def test_every_source_has_a_citation_and_unknown_keys_name_the_closest():
    assert OURS in SOURCES and source(OURS).is_ours
    papers = [s for s in SOURCES.values() if not (s.is_ours or s.is_code)]
    assert len(papers) == 5 and all(s.title and s.citation for s in papers)
    code = source("bug-or-feature-code")
    assert code.is_code and not code.is_ours
    assert cite("bug-or-feature-code", "configs/config.yaml").endswith(
        "(released code, the authors' public code), configs/config.yaml")
    assert cite("rethinking", "App. A").startswith("Peng, Zheng & Liu (2026)")
    with pytest.raises(ValueError, match="rethinking"):
        source("rethnking")
    with pytest.raises(ValueError, match="unknown source"):
        _spec(source="seed 001").judge()


def test_quoted_numbers_travel_with_the_claim_and_ours_quote_none():
    assert _spec().judge().quoted == {"published": 0.62}
    with pytest.raises(ValueError, match="not in its numbers"):
        _spec(quoted=("nope",)).judge()
    with pytest.raises(ValueError, match="quotes no"):
        _spec(source=OURS).judge()
    assert _spec(source=OURS, quoted=()).judge().source_key == OURS


def test_predictions_of_ours_travel_apart_from_the_quoted_numbers():
    numbers = {"published": 0.62, "tol": 0.15, "m1": 0.58, "m30": 0.71, "theory": 0.60}
    claim = _spec(numbers=numbers, predicted=("theory",)).judge()
    assert claim.quoted == {"published": 0.62} and claim.predicted == {"theory": 0.60}
    assert json.loads(dumps(claim))["predicted"] == {"theory": 0.60}
    assert _spec().judge().predicted == {}
    with pytest.raises(ValueError, match="not in its numbers"):
        _spec(predicted=("nope",)).judge()
    with pytest.raises(ValueError, match="both quoted"):
        _spec(predicted=("published",)).judge()


def test_released_code_is_cited_but_quotes_nothing():
    claim = _spec(source="bug-or-feature-code", where="configs/config.yaml", quoted=()).judge()
    assert claim.source_key == "bug-or-feature-code" and claim.quoted == {}
    with pytest.raises(ValueError, match="released code"):
        _spec(source="bug-or-feature-code").judge()
