"""The one definition of the hidden-state overshoot (``actlab.analysis``): how far a
trajectory goes past where it ends, on the far side from its start, and the step of that
peak, on closed-form trajectories."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from actlab.analysis import (
    finite_mean,
    overshoot,
    overshoot_peak_step,
    trajectory_overshoot,
)

STEPS = [0, 10, 100, 500, 1000]


def frame(*columns: list[float], steps: list[int] = STEPS) -> pd.DataFrame:
    """A steps x seeds frame with seeds 0, 1, ..."""
    return pd.DataFrame({seed: col for seed, col in enumerate(columns)}, index=steps)


def test_monotone_rise_is_no_overshoot():
    h = frame([0.0, 0.5, 0.9, 1.0, 1.0])
    assert overshoot(h)[0] == 0.0
    assert math.isnan(overshoot_peak_step(h)[0])


def test_monotone_fall_is_no_overshoot():
    h = frame([3.0, 1.0, 0.2, -0.5, -0.5])
    assert overshoot(h)[0] == 0.0
    assert math.isnan(overshoot_peak_step(h)[0])


def test_rise_past_the_end_and_back():
    h = frame([0.0, 2.0, 1.0, 1.0, 1.0])
    assert overshoot(h)[0] == 1.0
    assert overshoot_peak_step(h)[0] == 10.0


def test_fall_past_the_end_and_back():
    # starts at 1, ends at -1 (falling), dips to -4 at step 100: 3 past the end
    h = frame([1.0, -2.0, -4.0, -1.5, -1.0])
    assert overshoot(h)[0] == pytest.approx(3.0)
    assert overshoot_peak_step(h)[0] == 100.0


def test_going_back_beyond_the_start_is_not_an_overshoot():
    # rises overall (0 -> 1) but first dips to -3: that excursion is on the start's side
    h = frame([0.0, -3.0, 0.5, 1.0, 1.0])
    assert overshoot(h)[0] == 0.0
    assert math.isnan(overshoot_peak_step(h)[0])


def test_ending_where_it_started_takes_the_largest_excursion():
    up = frame([0.0, 1.0, 3.0, -1.0, 0.0])  # largest excursion +3: overshoot 3 at step 100
    assert overshoot(up)[0] == 3.0 and overshoot_peak_step(up)[0] == 100.0
    down = frame([0.0, 1.0, -2.0, 0.5, 0.0])  # largest excursion -2
    assert overshoot(down)[0] == 2.0 and overshoot_peak_step(down)[0] == 100.0
    flat = frame([0.5] * 5)
    assert overshoot(flat)[0] == 0.0 and math.isnan(overshoot_peak_step(flat)[0])


def test_several_seed_columns_are_independent():
    h = frame([0.0, 2.0, 1.0, 1.0, 1.0],    # overshoot 1 at step 10
              [0.0, 0.5, 0.9, 1.0, 1.0],    # monotone: 0
              [5.0, 3.0, 1.0, 2.5, 2.0])    # falls 5 -> 2, dips to 1 at 100: 1
    h.columns = [3, 7, 11]
    assert list(overshoot(h).index) == [3, 7, 11]
    assert overshoot(h).tolist() == pytest.approx([1.0, 0.0, 1.0])
    steps = overshoot_peak_step(h)
    assert steps[3] == 10.0 and math.isnan(steps[7]) and steps[11] == 100.0
    # what the summaries report: the seed mean of both (the step over the seeds that overshoot)
    assert finite_mean(overshoot(h)) == pytest.approx(2 / 3)
    assert finite_mean(steps) == pytest.approx(55.0)


def test_the_first_peak_is_reported_on_a_tie():
    h = frame([0.0, 2.0, 1.0, 2.0, 1.0])
    assert overshoot(h)[0] == 1.0 and overshoot_peak_step(h)[0] == 10.0


def test_nan_handling_matches_the_old_function():
    h = frame([0.0, math.nan, 2.0, 1.0, 1.0],   # a step not logged: skipped
              [0.0, 2.0, 1.0, 1.0, math.nan],   # no final value: nan (as before)
              [math.nan, 0.0, 2.0, 1.0, 1.0],   # logged from step 10: h_0 is that value
              [math.nan] * 5)                    # nothing logged
    over, steps = overshoot(h), overshoot_peak_step(h)
    assert over[0] == 1.0 and steps[0] == 100.0
    assert math.isnan(over[1]) and math.isnan(steps[1])
    assert over[2] == 1.0 and steps[2] == 100.0
    assert math.isnan(over[3]) and math.isnan(steps[3])
    # the callers' finite means skip the nan seeds
    assert finite_mean(over) == 1.0 and finite_mean(steps) == 100.0


def test_a_diverged_seed_is_nan_so_finite_means_and_dropna_skip_it():
    h = frame([0.0, math.inf, 2.0, 1.0, 1.0], [0.0, 2.0, 1.0, 1.0, 1.0])
    over = overshoot(h)
    assert math.isnan(over[0]) and over[1] == 1.0
    assert over.dropna().tolist() == [1.0]


def test_a_single_logged_value_has_no_overshoot_defined():
    assert all(math.isnan(v) for v in trajectory_overshoot([1.0], [0]))
    assert all(math.isnan(v) for v in trajectory_overshoot([], []))


def test_one_trajectory_with_and_without_steps():
    assert trajectory_overshoot([0.0, 2.0, 1.0]) == (1.0, 1.0)  # position as the step
    assert trajectory_overshoot(np.array([0.0, 2.0, 1.0]), [0, 100, 200]) == (1.0, 100.0)
    with pytest.raises(ValueError):
        trajectory_overshoot([0.0, 1.0], [0])


def test_old_initial_offset_is_not_counted():
    # the old measure, max_t |h_t - h_T|, scored this monotone approach as 1.0
    h = frame([0.0, 0.6, 0.9, 0.99, 1.0])
    assert (h - h.iloc[-1]).abs().max()[0] == 1.0
    assert overshoot(h)[0] == 0.0


def test_a_series_is_one_seed():
    s = pd.Series([0.0, 2.0, 1.0], index=[0, 5, 9])
    assert overshoot(s).tolist() == [1.0] and overshoot_peak_step(s).tolist() == [5.0]
