"""What each ``pitfalls`` demonstration should show, and its claims."""

from __future__ import annotations

import math

from actlab.runner.claims import claim_id
from actlab.runner.experiment import Claim

DEMOS = ("linear_collapse", "constant_start", "default_linear_scale", "wrong_fan_in_axis",
         "uniform_bound_as_std", "variance_vs_second_moment")

# The number each demonstration's claim reports as its value (its relation has several).
MAIN_NUMBER = {"linear_collapse": "linear_test_accuracy", "constant_start": "constant_test_accuracy",
               "default_linear_scale": "ratio", "wrong_fan_in_axis": "ratio",
               "uniform_bound_as_std": "ratio", "variance_vs_second_moment": "wrong_gain"}


def expected_relations(s: dict) -> dict[str, tuple[str, bool]]:
    """The relation each demonstration should show, and whether the measured numbers show it."""
    lc, cs, dl = s["linear_collapse"], s["constant_start"], s["default_linear_scale"]
    fa, ub, vm = s["wrong_fan_in_axis"], s["uniform_bound_as_std"], s["variance_vs_second_moment"]
    return {
        "linear_collapse": (
            "collapsed map equals the stack (< 1e-12); linear net at most 70% on the spirals "
            "(handbook 64.00%), ReLU net at least 10 points better (handbook 92.33%)",
            lc["max_abs_difference"] < 1e-12 and lc["linear_test_accuracy"] <= 0.70
            and lc["relu_test_accuracy"] >= lc["linear_test_accuracy"] + 0.10),
        "constant_start": (
            "rows stay equal (to rounding, < 1e-12); accuracy below the random start's "
            "(handbook 61.00% vs 92.33%)",
            cs["max_row_difference"] < 1e-12
            and cs["constant_test_accuracy"] < cs["random_test_accuracy"]),
        "default_linear_scale": (
            "default spread across inputs below 1e-6 of kaiming's (handbook 8.67e-9 vs 0.132); "
            "what is left is the biases (spread below 1e-6 of the mean output)",
            dl["ratio"] < 1e-6
            and dl["default_output_spread"] < 1e-6 * dl["default_mean_abs_output"]),
        "wrong_fan_in_axis": (
            "right std 0.0816, wrong 0.1414, ratio sqrt(3) (to 1e-12), also in drawn weights",
            abs(fa["right_std"] - 0.0816) < 5e-5 and abs(fa["wrong_std"] - 0.1414) < 5e-5
            and abs(fa["ratio"] - math.sqrt(3)) < 1e-12
            and abs(fa["measured_wrong_std"] / fa["measured_right_std"] - math.sqrt(3)) < 1e-12),
        "uniform_bound_as_std": (
            "variance ratio 3^10 = 59049 to rounding (relative 1e-9)",
            abs(ub["ratio"] / 59049.0 - 1) < 1e-9),
        "variance_vs_second_moment": (
            "ReLU variance 0.3408, gain 1.7129 instead of sqrt(2) (to 5e-5); the stack with "
            "the wrong gain grows within a factor 2 of the predicted (1.7129^2/2)^9 x 1.7129^2",
            abs(vm["relu_variance"] - 0.3408) < 5e-5 and abs(vm["wrong_gain"] - 1.7129) < 5e-5
            and abs(vm["right_gain"] - math.sqrt(2)) < 1e-9
            and 0.5 <= vm["net_input_second_moment_growth"] / vm["predicted_growth"] <= 2.0),
    }


def claims(summary: dict) -> list[Claim]:
    """One claim per demonstration, its expected relation and the measured numbers."""
    src = "seed 001, Pitfalls"
    out = []
    for demo in DEMOS:
        entry = summary[demo]
        numbers = ", ".join(f"{k} {v:.4g}" for k, v in entry.items()
                            if isinstance(v, float))
        out.append(Claim(f"{demo}: {entry['expected']}", numbers, entry["held"], src,
                         id=claim_id("pitfalls", demo, "expected-relation"),
                         value=entry.get(MAIN_NUMBER[demo]), comparison="compound"))
    return out
