"""Landmarks of activation graphs against closed forms: minima, peak slopes, the tanh-GELU gap
and saturation points, each computed independently of the search."""

from __future__ import annotations

import math

import pytest
import torch

from actlab.theory.gaussian import resolve
from actlab.theory.landmarks import falls_below, largest_gap, maximum, minimum


def test_minimum_and_maximum_of_closed_forms():
    parabola = minimum(lambda x: (x - 0.3) ** 2 + 1.5, -2.0, 2.0)
    assert parabola.at == pytest.approx(0.3, abs=1e-7) and parabola.value == pytest.approx(1.5)
    # The global maximum of a function with two peaks, not the first local one.
    two_peaks = maximum(
        lambda x: torch.exp(-((x + 1) ** 2)) + 2 * torch.exp(-((x - 2) ** 2)), -4.0, 4.0
    )
    assert abs(two_peaks.at - 2.0) < 0.01 and two_peaks.value > 2.0
    with pytest.raises(ValueError, match="interval"):
        minimum(lambda x: x, 1.0, 1.0)


def test_silu_minimum_solves_its_closed_form():
    # SiLU'(z) = s (1 + z (1 - s)) with s = sigmoid(z): zero where 1 + z (1 - s) = 0.
    silu, _ = resolve("silu")
    point = minimum(silu, -6.0, 0.0)
    s = 1.0 / (1.0 + math.exp(-point.at))
    assert 1.0 + point.at * (1.0 - s) == pytest.approx(0.0, abs=1e-7)
    assert point.value == pytest.approx(point.at * s, abs=1e-15)


def test_gelu_peak_slope_is_at_sqrt2_where_its_second_derivative_vanishes():
    # GELU'' = phi(z) (2 - z^2): zero at z = sqrt(2), so the slope peaks there.
    _, slope = resolve("gelu")
    peak = maximum(slope, 0.0, 6.0)
    assert peak.at == pytest.approx(math.sqrt(2.0), abs=1e-6)
    phi = math.exp(-1.0) / math.sqrt(2 * math.pi)
    cdf = 0.5 * math.erfc(-1.0)
    assert peak.value == pytest.approx(cdf + math.sqrt(2.0) * phi, abs=1e-12)


def test_the_tanh_gelu_gap_is_even_and_largest_away_from_zero():
    exact, _ = resolve("gelu")
    approx, _ = resolve("gelu:tanh")
    left, right = largest_gap(approx, exact, -10.0, 0.0), largest_gap(approx, exact, 0.0, 10.0)
    assert left.at == pytest.approx(-right.at, abs=1e-6)
    assert left.value == pytest.approx(right.value, rel=1e-9) and 1e-4 < left.value < 1e-3


def test_saturation_points_solve_the_slope_equation():
    _, d_sigmoid = resolve("sigmoid")
    _, d_tanh = resolve("tanh")
    # sigmoid' = s (1 - s) = 0.01 at s = (1 + sqrt(0.96)) / 2; tanh' = 1 - t^2 = 0.01 at t^2 = 0.99
    s = (1 + math.sqrt(0.96)) / 2
    assert falls_below(d_sigmoid, 0.01, 0.0, 20.0) == pytest.approx(math.log(s / (1 - s)), abs=1e-9)
    assert falls_below(d_tanh, 0.01, 0.0, 20.0) == pytest.approx(
        math.atanh(math.sqrt(0.99)), abs=1e-9
    )
    with pytest.raises(ValueError, match="level"):
        falls_below(d_tanh, 2.0, 0.0, 20.0)
