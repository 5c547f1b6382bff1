"""Verdicts over seeds: intervals against scipy.stats, the three verdicts on samples built to
land on each side of the bar and across it, equivalence, multiplicity, the seeds estimate."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from actlab.runner import verdicts
from actlab.runner.claims import ClaimSpec, all_of, any_of, gt, lt, within, within_factor
from actlab.runner.per_seed import judge_over_seeds, seed_records
from actlab.runner.verdicts import (
    bonferroni_level,
    holm,
    judge_sample,
    seeds_needed,
    t_interval,
    tost,
    welch_interval,
)

SAMPLES = [[0.3, -0.1, 0.25], [1.0, 2.0, 3.5, 2.2, 1.9], list(np.linspace(-1, 2, 8) ** 2)]


@pytest.mark.parametrize("sample", SAMPLES)
def test_t_interval_equals_scipy(sample):
    ours = t_interval(sample)
    ref = stats.ttest_1samp(sample, 0.0).confidence_interval(0.95)
    assert ours.low == pytest.approx(ref.low, rel=1e-12)
    assert ours.high == pytest.approx(ref.high, rel=1e-12)
    assert ours.n == len(sample)


def test_t_interval_drops_non_finite_and_needs_two_values():
    assert t_interval([1.0]) is None
    assert t_interval([1.0, float("nan")]) is None
    with_nan = t_interval([1.0, 2.0, float("nan"), 4.0])
    assert with_nan.n == 3 and with_nan.mean == pytest.approx(7 / 3)


def test_the_t_quantiles_the_issue_quotes():
    # n = 2 and 3: t = 12.7 and 4.30 (two-sided 95 %)
    for n, t in ((2, 12.706), (3, 4.303)):
        sample = [0.0, 1.0] if n == 2 else [0.0, 1.0, 2.0]
        interval = t_interval(sample)
        sd = np.std(sample, ddof=1)
        assert (interval.high - interval.mean) / (sd / math.sqrt(n)) == pytest.approx(t, abs=1e-3)


@pytest.mark.parametrize("a,b", [([1.0, 2.0, 3.0], [0.5, 0.7, 0.2, 0.9]),
                                 ([10.0, 12.5, 9.0, 11.0, 13.0], [8.0, 8.5])])
def test_welch_interval_equals_scipy(a, b):
    ours = welch_interval(a, b)
    ref = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    assert ours.low == pytest.approx(ref.low, rel=1e-10)
    assert ours.high == pytest.approx(ref.high, rel=1e-10)


def _leaf(op, value, bound):
    return {"op": op, "value": value, "bound": bound}


def _judge(op, values, bounds, paired=True):
    pooled = _leaf(op, float(np.mean(values)), float(np.mean(bounds)))
    return judge_sample(pooled, [_leaf(op, v, b) for v, b in zip(values, bounds)], paired)


def test_three_verdicts_on_each_side_of_the_bar_and_across_it():
    # claim: value < bound, paired per seed
    above = _judge("<", [1.1, 1.2, 1.15], [1.0, 1.0, 1.0])  # wholly violates
    below = _judge("<", [0.8, 0.82, 0.79], [1.0, 1.0, 1.0])  # wholly satisfies
    across = _judge("<", [0.9, 1.1, 0.95], [1.0, 1.0, 1.0])  # spans the bar
    assert below.held is True and above.held is False and across.held is None
    assert across.reason.startswith(verdicts.SPANS_BAR) and "3 seeds" in across.reason
    assert across.seeds_needed is not None and across.seeds_needed > 3
    ref = stats.ttest_1samp(np.array([0.8, 0.82, 0.79]) - 1.0, 0.0).confidence_interval()
    assert below.interval.low == pytest.approx(ref.low) and below.n == 3


def test_the_issue_vit_shift_sample_is_undecided():
    # one seed of three has the other sign: the mean alone said "held"
    verdict = _judge("<", [0.0126, -0.0997, -0.0666], [0.0, 0.0, 0.0])
    assert verdict.held is None


def test_pairing_removes_the_shared_seed_effect():
    base = np.array([1.0, 3.0, 5.0, 2.0])  # large between-seed spread shared by both arms
    shifted, unshifted = base - 0.1, base.copy()
    assert _judge("<", shifted, unshifted, paired=True).held is True
    assert _judge("<", shifted, unshifted, paired=False).held is None


def test_equivalence_within_a_margin():
    inside = judge_sample({"op": "within", "value": 1.0, "bound": 0.1, "reference": 1.0},
                          [{"op": "within", "value": v, "bound": 0.1, "reference": 1.0}
                           for v in (0.99, 1.01, 1.0, 1.02)])
    outside = judge_sample({"op": "within", "value": 1.5, "bound": 0.1, "reference": 1.0},
                           [{"op": "within", "value": v, "bound": 0.1, "reference": 1.0}
                            for v in (1.49, 1.51, 1.5)])
    edge = judge_sample({"op": "within", "value": 1.09, "bound": 0.1, "reference": 1.0},
                        [{"op": "within", "value": v, "bound": 0.1, "reference": 1.0}
                         for v in (1.0, 1.18, 1.09)])
    assert (inside.held, outside.held, edge.held) == (True, False, None)
    assert tost([0.99, 1.01, 1.0, 1.02 - 0.0], 0.1 + 1.0) is True
    assert tost(np.array([0.99, 1.01, 1.0, 1.02]) - 1.0, 0.1) is True
    assert tost([0.0, 0.3, -0.3], 0.1) is False


def test_within_factor_judges_the_log_ratio():
    check = {"op": "within-factor", "value": 2.0, "bound": 1.5, "reference": 2.0}
    seeds = [{**check, "value": v} for v in (1.9, 2.1, 2.0)]
    assert judge_sample(check, seeds).held is True
    far = [{**check, "value": v} for v in (8.0, 8.4, 7.9)]
    assert judge_sample({**check, "value": 8.1}, far).held is False


def test_holm_against_a_hand_worked_example():
    # sorted p: 0.01 (<= .05/4), 0.015 (<= .05/3), 0.03 (> .05/2): stop
    assert holm([0.03, 0.01, 0.2, 0.015]) == [False, True, False, True]
    assert bonferroni_level(5) == pytest.approx(0.99)


def test_any_of_is_corrected_for_multiplicity_all_of_is_not():
    # each part alone just clears the 95 % interval but not the corrected level
    values = [0.4, 0.6, 0.8]
    t95 = stats.ttest_1samp(values, 0).confidence_interval(0.95)
    t99 = stats.ttest_1samp(values, 0).confidence_interval(1 - 0.05 / 4)
    assert t95.low > 0 and t99.low < 0
    leaf = {"op": ">", "value": float(np.mean(values)), "bound": 0.0}
    seed_leaves = [{"op": ">", "value": v, "bound": 0.0} for v in values]
    low_leaf = {"op": ">", "value": -1.0, "bound": 0.0}
    low_seeds = [{"op": ">", "value": v, "bound": 0.0} for v in (-1.1, -0.9, -1.0)]
    anyof = {"op": "any-of", "parts": [leaf, low_leaf, low_leaf, low_leaf]}
    any_seeds = [{"op": "any-of", "parts": [s, ls, ls, ls]} for s, ls in zip(seed_leaves, low_seeds)]
    assert judge_sample(anyof, any_seeds).held is None  # not at 1 - 0.05/4
    allof = {"op": "all-of", "parts": [leaf, leaf]}
    all_seeds = [{"op": "all-of", "parts": [s, s]} for s in seed_leaves]
    assert judge_sample(allof, all_seeds).held is True  # intersection-union: no correction


def test_categorical_labels_need_stability_over_three_seeds():
    check = {"op": "in", "value": "relu", "allowed": ["relu"]}
    seeds = [{**check, "value": v} for v in ("relu", "relu", "relu")]
    assert judge_sample(check, seeds).held is True
    assert judge_sample(check, seeds[:2]).held is None
    mixed = [{**check, "value": v} for v in ("relu", "gelu", "relu")]
    assert judge_sample(check, mixed).held is None
    none = [{**check, "value": v} for v in ("gelu", "silu", "gelu")]
    assert judge_sample({**check, "value": "gelu"}, none).held is False


def test_seeds_needed_matches_the_interval_it_promises():
    sd, distance = 0.05, 0.03
    n = seeds_needed(distance, sd)
    t = stats.t.ppf(0.975, n - 1)
    assert t * sd / math.sqrt(n) < distance
    t_before = stats.t.ppf(0.975, n - 2)
    assert t_before * sd / math.sqrt(n - 1) >= distance
    assert seeds_needed(0.0, 1.0) is None  # a mean on the bar: no number of seeds
    assert seeds_needed(1.0, 0.0) == 2


def _spec(values, deterministic=False, paired=True, bar=0.0):
    return ClaimSpec(id="x/y/z", text="t", measured="m", check=lt(values, bar), source="actlab",
                     deterministic=deterministic, paired=paired)


def test_the_runner_judges_claims_over_seeds():
    pooled = [vars(_spec(-0.05).judge())]
    per_seed = {s: [vars(_spec(v).judge())] for s, v in enumerate((-0.04, -0.05, -0.06))}
    (row,) = judge_over_seeds(pooled, per_seed, 3)
    assert row["held"] is True and row["n"] == 3 and row["interval"][1] < 0
    (one,) = judge_over_seeds(pooled, {}, 1)
    assert one["held"] is None and one["reason"].startswith(verdicts.TOO_FEW_SEEDS)
    exact = [vars(_spec(-0.05, deterministic=True).judge())]
    (det,) = judge_over_seeds(exact, {}, 1)
    assert det["held"] is True


def test_a_combined_claim_keeps_its_pairing_per_part():
    spec = ClaimSpec(id="x/y/z", text="t", measured="m", source="actlab",
                     check=all_of(gt(1.0, 0.5), within(1.0, 1.0, 0.2)))
    pooled = [vars(spec.judge())]
    per_seed = {}
    for s, v in enumerate((0.95, 1.05, 1.0)):
        per_seed[s] = [vars(ClaimSpec(id="x/y/z", text="t", measured="m", source="actlab",
                                      check=all_of(gt(v, 0.5), within(v, 1.0, 0.2))).judge())]
    (row,) = judge_over_seeds(pooled, per_seed, 3)
    assert row["held"] is True
    assert any_of(lt(1, 2)).verdict() is True and within_factor(2.0, 2.0, 1.1).verdict() is True


def test_seed_records_cut_an_ensemble_unit_to_one_seed():
    records = [{"id": "a", "seeds": [0, 1], "rows": [["r", 0, 1, "", "m", 1.0],
                                                     ["r", 1, 1, "", "m", 2.0]], "data": {}},
               {"id": "b", "seeds": [1], "rows": [["q", 1, 1, "", "m", 3.0]], "data": {}}]
    one = seed_records(records, 1)
    assert [r["id"] for r in one] == ["a", "b"]
    assert one[0]["rows"] == [["r", 1, 1, "", "m", 2.0]] and one[0]["seeds"] == [1]
    assert [r["id"] for r in seed_records(records, 0)] == ["a"]
