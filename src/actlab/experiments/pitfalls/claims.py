"""What each ``pitfalls`` demonstration should show, and its claims.

Each demonstration is one of the mistakes in "Pitfalls" of the handbook page "Activations and
initialization", whose numbers the claims quote; the tolerances (and, for the two trained
demonstrations, the margins on the spirals) are ours.
"""

from __future__ import annotations

import math

from actlab.runner.claims import (
    ClaimSpec,
    all_of,
    claim_id,
    ge,
    judge_all,
    le,
    lt,
    within,
    within_factor,
)
from actlab.runner.experiment import Claim

NAME = "pitfalls"
WHERE = "Pitfalls"
DEMOS = ("linear_collapse", "constant_start", "default_linear_scale", "wrong_fan_in_axis",
         "uniform_bound_as_std", "variance_vs_second_moment")
ROUNDING = 1e-12  # "equal" to rounding in float64


def _spec(demo: str, text: str, measured: str, check, numbers: dict,
          quoted: tuple[str, ...] = ()) -> ClaimSpec:
    return ClaimSpec(id=claim_id(NAME, demo, "expected-relation"), text=f"{demo}: {text}",
                     measured=measured, check=check, source="handbook", where=WHERE,
                     numbers=numbers, quoted=quoted)


def specs(s: dict) -> list[ClaimSpec]:
    """The relation each demonstration should show, judged on the measured numbers of ``s``
    (the summary: one dict of numbers per demonstration); the first test of each is on the
    claim's main number."""
    lc, cs, dl = s["linear_collapse"], s["constant_start"], s["default_linear_scale"]
    fa, ub, vm = s["wrong_fan_in_axis"], s["uniform_bound_as_std"], s["variance_vs_second_moment"]
    out = []

    n = {"linear": 0.64, "relu": 0.9233, "rounding": ROUNDING, "most": 0.70, "margin": 0.10,
         "m_diff": lc["max_abs_difference"], "m_linear": lc["linear_test_accuracy"],
         "m_relu": lc["relu_test_accuracy"]}
    out.append(_spec(
        "linear_collapse",
        "collapsed map equals the stack (< {rounding:.0e}); linear net at most {most:.0%} on "
        "the spirals (handbook {linear:.2%}), ReLU net at least {margin:.0%} better (handbook "
        "{relu:.2%})",
        "difference {m_diff:.3g}; linear {m_linear:.2%}, ReLU {m_relu:.2%}",
        all_of(le(n["m_linear"], n["most"]), lt(n["m_diff"], ROUNDING),
               ge(n["m_relu"], n["m_linear"] + n["margin"])),
        n, ("linear", "relu")))

    n = {"constant": 0.61, "random": 0.9233, "rounding": ROUNDING,
         "m_rows": cs["max_row_difference"], "m_constant": cs["constant_test_accuracy"],
         "m_random": cs["random_test_accuracy"]}
    out.append(_spec(
        "constant_start",
        "rows stay equal (to rounding, < {rounding:.0e}); accuracy below the random start's "
        "(handbook {constant:.2%} vs {random:.2%})",
        "row difference {m_rows:.3g}; constant {m_constant:.2%}, random {m_random:.2%}",
        all_of(lt(n["m_constant"], n["m_random"]), lt(n["m_rows"], ROUNDING)),
        n, ("constant", "random")))

    n = {"default": 8.67e-9, "kaiming": 0.132, "below": 1e-6, "m_ratio": dl["ratio"],
         "m_spread": dl["default_output_spread"], "m_mean": dl["default_mean_abs_output"]}
    out.append(_spec(
        "default_linear_scale",
        "default spread across inputs below {below:.0e} of kaiming's (handbook {default:.3g} vs "
        "{kaiming}); what is left is the biases (spread below {below:.0e} of the mean output)",
        "ratio {m_ratio:.3g}; spread {m_spread:.3g}, mean output {m_mean:.3g}",
        all_of(lt(n["m_ratio"], n["below"]), lt(n["m_spread"], n["below"] * n["m_mean"])),
        n, ("default", "kaiming")))

    n = {"right": 0.0816, "wrong": 0.1414, "tol": 5e-5, "rounding": ROUNDING,
         "m_ratio": fa["ratio"], "m_right": fa["right_std"], "m_wrong": fa["wrong_std"],
         "m_drawn": fa["measured_wrong_std"] / fa["measured_right_std"]}
    out.append(_spec(
        "wrong_fan_in_axis",
        "right std {right}, wrong {wrong} (to {tol:.0e}), ratio sqrt(3) (to {rounding:.0e}), "
        "also in drawn weights",
        "right {m_right:.4f}, wrong {m_wrong:.4f}, ratio {m_ratio:.6f}, drawn {m_drawn:.6f}",
        all_of(within(n["m_ratio"], math.sqrt(3), ROUNDING),
               within(n["m_right"], n["right"], n["tol"]),
               within(n["m_wrong"], n["wrong"], n["tol"]),
               within(n["m_drawn"], math.sqrt(3), ROUNDING)),
        n, ("right", "wrong")))

    n = {"ratio": 59049.0, "rel": 1e-9, "m_ratio": ub["ratio"]}
    out.append(_spec(
        "uniform_bound_as_std",
        "variance ratio 3^10 = {ratio:.0f} to rounding (relative {rel:.0e})",
        "ratio {m_ratio:.6f}",
        within(n["m_ratio"], n["ratio"], n["rel"] * n["ratio"]),
        n, ("ratio",)))

    n = {"variance": 0.3408, "gain": 1.7129, "tol": 5e-5, "rounding": 1e-9, "factor": 2.0,
         "m_variance": vm["relu_variance"], "m_gain": vm["wrong_gain"],
         "m_right": vm["right_gain"], "m_growth": vm["net_input_second_moment_growth"],
         "predicted": vm["predicted_growth"]}
    out.append(_spec(
        "variance_vs_second_moment",
        "ReLU variance {variance}, gain {gain} instead of sqrt(2) (to {tol:.0e}); the stack "
        "with the wrong gain grows within a factor {factor:g} of the predicted "
        "({gain}^2/2)^9 x {gain}^2",
        "variance {m_variance:.4f}, gain {m_gain:.4f} (right {m_right:.4f}); growth "
        "{m_growth:.4g} against {predicted:.4g}",
        all_of(within(n["m_gain"], n["gain"], n["tol"]),
               within(n["m_variance"], n["variance"], n["tol"]),
               within(n["m_right"], math.sqrt(2), n["rounding"]),
               within_factor(n["m_growth"], n["predicted"], n["factor"])),
        n, ("variance", "gain")))
    return out


def claims(summary: dict) -> list[Claim]:
    """One claim per demonstration, its expected relation and the measured numbers."""
    return judge_all(specs(summary))
