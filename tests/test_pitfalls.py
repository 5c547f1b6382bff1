"""The pitfalls demonstrations: each measured number and its expected relation."""

from __future__ import annotations

import math

import pytest

from actlab.experiments.pitfalls import (
    PitfallsConfig,
    constant_start,
    default_linear_scale,
    linear_collapse,
    uniform_bound_as_std,
    variance_vs_second_moment,
    wrong_fan_in_axis,
)
from actlab.experiments.pitfalls.claims import claims


def test_uniform_bound_as_std_is_three_to_the_depth_exactly():
    out = uniform_bound_as_std(0)
    assert out["ratio"] == pytest.approx(59049.0, rel=1e-9)


def test_wrong_fan_in_axis():
    out = wrong_fan_in_axis(0)
    assert out["right_std"] == pytest.approx(0.0816, abs=5e-5)
    assert out["wrong_std"] == pytest.approx(0.1414, abs=5e-5)
    assert out["ratio"] == pytest.approx(math.sqrt(3), rel=1e-12)


def test_variance_instead_of_second_moment():
    out = variance_vs_second_moment(0)
    assert out["relu_variance"] == pytest.approx((math.pi - 1) / (2 * math.pi), abs=1e-12)
    assert out["wrong_gain"] == pytest.approx(1.7129, abs=5e-5)
    assert out["right_gain"] == pytest.approx(math.sqrt(2), abs=1e-12)
    # the wrong gain grows the signal by 1.7129^2 / 2 = 1.467 per layer
    assert 30 < out["net_input_second_moment_growth"] < 300


def test_default_linear_scale_leaves_only_the_biases():
    out = default_linear_scale(0)
    assert out["kaiming_output_spread"] > 0.01  # the handbook: 0.132
    assert out["default_output_spread"] < 1e-6  # the handbook: 8.67e-9
    assert out["default_output_spread"] < 1e-6 * out["default_mean_abs_output"]


def test_by_construction_constant_start_keeps_rows_equal():
    # equal units get equal gradients: a test, not a claim
    config = PitfallsConfig(epochs=3)
    out = constant_start(config, 0)
    assert out["max_row_difference"] < 1e-12


def test_by_construction_three_linear_layers_equal_their_collapsed_map():
    # a relation of linear algebra, not a finding: a test, not a claim
    out = linear_collapse(PitfallsConfig(epochs=1), 0)
    assert out["max_abs_difference"] < 1e-12


def test_by_construction_wrong_axis_ratio_is_sqrt3_in_formula_and_in_drawn_weights():
    # the formula gives sqrt(300/100); weights drawn once and scaled by each std keep the ratio
    for seed in (0, 1):
        out = wrong_fan_in_axis(seed)
        assert out["ratio"] == pytest.approx(math.sqrt(3), rel=1e-12)
        assert out["measured_wrong_std"] / out["measured_right_std"] == pytest.approx(
            math.sqrt(3), rel=1e-12)


def test_by_construction_uniform_bound_gives_three_to_the_depth_in_every_seed():
    # the same draws scaled by sqrt(3) through ReLU layers with zero biases: exactly 3^depth
    for seed in (1, 2):
        assert uniform_bound_as_std(seed, depth=4, width=32)["ratio"] == pytest.approx(
            3.0**4, rel=1e-9)


GOOD = {
    "linear_collapse": {"max_abs_difference": 1e-16, "linear_test_accuracy": 0.64,
                        "relu_test_accuracy": 0.92},
    "constant_start": {"max_row_difference": 0.0, "constant_test_accuracy": 0.61,
                       "random_test_accuracy": 0.92},
    "default_linear_scale": {"ratio": 1e-8, "default_output_spread": 1e-9,
                             "default_mean_abs_output": 0.03},
    "wrong_fan_in_axis": wrong_fan_in_axis(0),
    "uniform_bound_as_std": {"ratio": 59049.0},
    "variance_vs_second_moment": variance_vs_second_moment(0),
}


def test_relations_fail_for_wrong_numbers():
    assert all(c.held is True for c in claims(GOOD))
    ids = [c.id for c in claims(GOOD)]
    assert "pitfalls/uniform-bound-as-std/expected-relation" not in ids  # by construction
    assert ids[-1] == "pitfalls/variance-vs-second-moment/growth-follows-recursion"
    bad = dict(GOOD, constant_start=dict(GOOD["constant_start"], constant_test_accuracy=0.95),
               linear_collapse=dict(GOOD["linear_collapse"], relu_test_accuracy=0.7),
               variance_vs_second_moment=dict(GOOD["variance_vs_second_moment"],
                                              net_input_second_moment_growth=1.0))
    held = {c.id.split("/", 1)[1]: c.held for c in claims(bad)}
    assert held["constant-start/expected-relation"] is False
    assert held["linear-collapse/expected-relation"] is False
    assert held["variance-vs-second-moment/growth-follows-recursion"] is False
    assert sum(h is False for h in held.values()) == 3


def test_closed_forms_are_deterministic_and_random_measurements_are_not():
    declared = {c.id.split("/", 1)[1]: (c.deterministic, c.paired) for c in claims(GOOD)}
    assert declared == {
        "linear-collapse/expected-relation": (False, True),
        "constant-start/expected-relation": (False, False),  # other initial weights
        "default-linear-scale/expected-relation": (False, True),
        "wrong-fan-in-axis/expected-relation": (True, True),
        "variance-vs-second-moment/expected-relation": (True, True),
        "variance-vs-second-moment/growth-follows-recursion": (False, True),
    }


def test_config_errors_name_the_field():
    from actlab.errors import ConfigError

    with pytest.raises(ConfigError, match="epochs: must be >= 1, got 0"):
        PitfallsConfig(epochs=0)
    with pytest.raises(ConfigError, match="lr: must be > 0, got -0.1"):
        PitfallsConfig(lr=-0.1)
