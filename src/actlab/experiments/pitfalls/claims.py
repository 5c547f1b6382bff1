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
          quoted: tuple[str, ...] = (), what: str = "expected-relation", source: str = "handbook",
          **declared) -> ClaimSpec:
    return ClaimSpec(id=claim_id(NAME, demo, what), text=f"{demo}: {text}",
                     measured=measured, check=check, source=source, where=WHERE,
                     numbers=numbers, quoted=quoted, **declared)


def specs(s: dict) -> list[ClaimSpec]:
    """The relation each demonstration should show, judged on the measured numbers of ``s``
    (the summary: one dict of numbers per demonstration); the first test of each is on the
    claim's main number.

    Relations that hold by construction are tests (``tests/test_pitfalls.py``), not claims:
    three ``Linear`` layers equal their collapsed map (linear algebra); a constant start keeps
    equal rows (equal units get equal gradients); the wrong fan-in axis gives sqrt(300/100) in
    the formula and in weights drawn once and scaled by each std; and He's uniform bound used as
    the std gives exactly 3^10 (the same draws through a ReLU stack with zero biases: the
    handbook says "exactly" for that reason), so ``uniform_bound_as_std`` is measured and
    reported but has no claim. The closed forms (the stds of the wrong axis, ReLU's variance
    and the gains) are deterministic; the trained networks and the random stacks are judged
    over seeds.
    """
    lc, cs, dl = s["linear_collapse"], s["constant_start"], s["default_linear_scale"]
    fa, vm = s["wrong_fan_in_axis"], s["variance_vs_second_moment"]
    out = []

    n = {"linear": 0.64, "relu": 0.9233, "most": 0.70, "margin": 0.10,
         "m_linear": lc["linear_test_accuracy"], "m_relu": lc["relu_test_accuracy"]}
    out.append(_spec(
        "linear_collapse",
        "a linear net reaches at most {most:.0%} on the spirals (handbook {linear:.2%}), the "
        "ReLU net at least {margin:.0%} better (handbook {relu:.2%})",
        "linear {m_linear:.2%}, ReLU {m_relu:.2%}",
        all_of(le(n["m_linear"], n["most"]), ge(n["m_relu"], n["m_linear"] + n["margin"])),
        n, ("linear", "relu")))

    n = {"constant": 0.61, "random": 0.9233, "m_constant": cs["constant_test_accuracy"],
         "m_random": cs["random_test_accuracy"], "m_rows": cs["max_row_difference"]}
    out.append(_spec(
        "constant_start",
        "the constant start (rows stay equal) tests below the random start (handbook "
        "{constant:.2%} vs {random:.2%})",
        "constant {m_constant:.2%}, random {m_random:.2%} (row difference {m_rows:.3g})",
        lt(n["m_constant"], n["m_random"]),
        # the two starts share the data and batch order of a seed, not the initial weights
        n, ("constant", "random"), paired=False))

    n = {"default": 8.67e-9, "kaiming": 0.132, "below": 1e-6, "m_ratio": dl["ratio"],
         "m_spread": dl["default_output_spread"], "m_mean": dl["default_mean_abs_output"]}
    out.append(_spec(
        "default_linear_scale",
        "default spread across inputs below {below:.0e} of kaiming's (handbook {default:.3g} vs "
        "{kaiming}); what is left is the biases (spread below {below:.0e} of the mean output)",
        "ratio {m_ratio:.3g}; spread {m_spread:.3g}, mean output {m_mean:.3g}",
        all_of(lt(n["m_ratio"], n["below"]), lt(n["m_spread"], n["below"] * n["m_mean"])),
        n, ("default", "kaiming")))

    n = {"right": 0.0816, "wrong": 0.1414, "tol": 5e-5, "m_right": fa["right_std"],
         "m_wrong": fa["wrong_std"], "m_ratio": fa["ratio"]}
    out.append(_spec(
        "wrong_fan_in_axis",
        "He's std for 300 inputs and 100 outputs is {right} from shape[1] and {wrong} from "
        "shape[0] (each within {tol:.0e})",
        "right {m_right:.4f}, wrong {m_wrong:.4f} (ratio {m_ratio:.6f})",
        all_of(within(n["m_wrong"], n["wrong"], n["tol"]),
               within(n["m_right"], n["right"], n["tol"])),
        n, ("right", "wrong"), deterministic=True))

    n = {"variance": 0.3408, "gain": 1.7129, "tol": 5e-5, "rounding": 1e-9,
         "m_variance": vm["relu_variance"], "m_gain": vm["wrong_gain"],
         "m_right": vm["right_gain"]}
    out.append(_spec(
        "variance_vs_second_moment",
        "ReLU variance {variance}, gain {gain} instead of sqrt(2) (to {tol:.0e}; sqrt(2) to "
        "{rounding:.0e})",
        "variance {m_variance:.4f}, gain {m_gain:.4f} (right {m_right:.10f})",
        all_of(within(n["m_gain"], n["gain"], n["tol"]),
               within(n["m_variance"], n["variance"], n["tol"]),
               within(n["m_right"], math.sqrt(2), n["rounding"])),
        n, ("variance", "gain"), deterministic=True))  # Gaussian quadrature: no seed enters

    n = {"gain": 1.7129, "factor": 2.0, "m_growth": vm["net_input_second_moment_growth"],
         "predicted": vm["predicted_growth"]}
    out.append(_spec(
        "variance_vs_second_moment",
        "a 10-layer stack of 256 units with the wrong gain grows within a factor {factor:g} of "
        "the recursion's ({gain}^2/2)^9 x {gain}^2 = {predicted:.4g}",
        "growth {m_growth:.4g}",
        within_factor(n["m_growth"], n["predicted"], n["factor"]),
        n, what="growth-follows-recursion", source="actlab", predicted=("predicted",)))
    return out


def claims(summary: dict) -> list[Claim]:
    """The relations the demonstrations should show (see :func:`specs`)."""
    return judge_all(specs(summary))
