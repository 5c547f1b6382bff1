"""The claims of the ``gallery``: published tables reproduced (the handbook page "Activations and
initialization" and Table 1 of "Rethinking Activation Functions"), and the handbook's
statements about the recursion example."""

from __future__ import annotations

import math

from actlab.experiments.gallery.summary import AVERAGE_KEYS, PUBLISHED_AVERAGES, PUBLISHED_SHIFTS
from actlab.runner.claims import (
    ClaimSpec,
    all_of,
    claim_id,
    ge,
    judge_all,
    le,
    within,
    within_factor,
)
from actlab.runner.experiment import Claim

NAME = "gallery"
CHECKING = "Checking the predictions"  # the handbook's part on the recursion example


def _spread(values: list[float]) -> float:
    """max/min of the standard deviations sqrt(values) over layers."""
    return math.sqrt(max(values) / min(values))


def _per_layer_factor(values: list[float]) -> float:
    """Geometric-mean factor per layer by which sqrt(values) grows from the first to the last."""
    return math.sqrt(values[-1] / values[0]) ** (1 / (len(values) - 1))


def claims(summary: dict) -> list[Claim]:
    """The headline rows: published numbers reproduced, and the recursion example's statements."""
    averages, shifts, gains, rec = (summary[k] for k in ("averages", "shifts", "gains",
                                                          "recursion"))
    return judge_all([_averages(averages), _shifts(shifts), _gains(gains), *_recursion(rec)])


def _averages(averages: dict) -> ClaimSpec:
    """The handbook's Gaussian averages of its eight activations, matched entry by entry."""
    checked = {k: v for k, v in averages.items() if "published" in v}
    missed = sorted(k for k, v in checked.items() if not v["matches"])
    table = {f"{spec}_{key}": value for spec, row in PUBLISHED_AVERAGES.items()
             for key, value in zip(AVERAGE_KEYS, row, strict=True)}
    n = {**table, "activations": len(PUBLISHED_AVERAGES), "checked": len(checked),
         "matched": len(checked) - len(missed), "missed": len(missed),
         "differ": ", ".join(missed)}
    return ClaimSpec(
        id=claim_id(NAME, "all", "averages-match-published"),
        text="Gaussian averages (mean, E f², E f'², gain) of the {activations} activations, "
             "4 decimals",
        measured="{matched}/{checked} activations match" + ("; differ: {differ}" if missed else ""),
        check=all_of(le(n["missed"], 0), ge(n["checked"], n["activations"])),
        source="handbook", where="Averages over a Gaussian net input", numbers=n,
        quoted=tuple(table))


def _shifts(shifts: dict) -> ClaimSpec:
    """Table 1's shifts (and tanh's, App. A.1) at q = 1/3, to three decimals."""
    n = {**{f"paper_{k}": v for k, v in PUBLISHED_SHIFTS.items()},
         "theory": ", ".join(f"{k} {v['theory']:.3f}" for k, v in shifts.items()),
         "mismatched": sum(not v["matches"] for v in shifts.values())}
    return ClaimSpec(
        id=claim_id(NAME, "all", "theory-shifts-match-published"),
        text="theory shifts b at q = 1/3: ReLU {paper_relu:.3f}, GELU {paper_gelu:.3f}, Swish "
             "{paper_swish:.3f}, sigmoid {paper_sigmoid:.3f}, tanh {paper_tanh:g}",
        measured="{theory}", check=le(n["mismatched"], 0),
        source="rethinking", where="Table 1, App. A.1", numbers=n,
        quoted=tuple(f"paper_{k}" for k in PUBLISHED_SHIFTS))


def _gains(gains: dict) -> ClaimSpec:
    """Fixed-point gains equal PyTorch's where PyTorch's is exact; tanh's is the handbook's."""
    same = [k for k in ("linear", "conv2d", "relu", "leaky_relu") if gains[k]["equal"]]
    tanh_gain = dict(zip(AVERAGE_KEYS, PUBLISHED_AVERAGES["tanh"], strict=True))["gain"]
    n = {"tanh_gain": tanh_gain, "tol": 5e-5, "exact": 4, "equal": len(same),
         "same": ", ".join(same),
         **{f"{k}_{side}": gains[k][key] for k in ("tanh", "sigmoid", "selu")
            for side, key in (("fp", "fixed_point"), ("torch", "torch"))}}
    return ClaimSpec(
        id=claim_id(NAME, "all", "fixed-point-gains"),
        text="the fixed-point gain equals PyTorch's for linear, ReLU and leaky ReLU; tanh's is "
             "{tanh_gain}, close to PyTorch's 5/3",
        measured="equal for {same}; tanh {tanh_fp:.4f} vs {tanh_torch:.4f}, sigmoid "
                 "{sigmoid_fp:.4f} vs {sigmoid_torch:.4f}, selu {selu_fp:.4f} vs {selu_torch:.4f}",
        # tanh's gain first (the claim's number), within half a unit of its fourth decimal
        check=all_of(within(n["tanh_fp"], n["tanh_gain"], n["tol"]), ge(n["equal"], n["exact"])),
        source="handbook", where="A gain for any activation", numbers=n, quoted=("tanh_gain",))


def _recursion(rec: dict) -> list[ClaimSpec]:
    """The handbook's four statements about one measured network per setting."""
    he = rec["ReLU, He"]
    spread = {"factor": 2.0, "spread": max(_spread(he["measured_activation_second_moment"][:-1]),
                                           _spread(he["measured_error_variance"][:-1]))}
    sig = rec["sigmoid, Xavier"]
    # Going back from layer 20 to layer 1 the error shrinks by the factor it grows forwards.
    shrink = {"published": 4.3, "tol": 0.3,
              "measured": _per_layer_factor(sig["measured_error_variance"][:-1]),
              "predicted": _per_layer_factor(sig["predicted_error_variance"][:-1])}
    grads_x = rec["ReLU, Xavier"]["measured_weight_gradient_norm"][:-1]
    grads_he = he["measured_weight_gradient_norm"][:-1]
    flat = {"flat_max": 2.0, "ratio_published": 2.0 ** -10, "factor": 2.0,
            "flat": max(grads_x) / min(grads_x),
            "ratio": math.exp(sum(math.log(a / b) for a, b in zip(grads_x, grads_he))
                              / len(grads_x))}
    follows = {"max_median": 1.25, "median": max(v["median_factor"] for v in rec.values()),
               "worst": max(v["worst_factor"] for v in rec.values())}
    return [
        ClaimSpec(
            id=claim_id(NAME, "relu-he", "sizes-within-factor-two"),
            text="ReLU with He: forward and backward sizes stay within a factor of {factor:g} "
                 "across all 20 layers",
            measured="measured max/min of the std over hidden layers {spread:.2f}",
            check=le(spread["spread"], spread["factor"]),
            source="handbook", where=CHECKING, numbers=spread),
        ClaimSpec(
            id=claim_id(NAME, "sigmoid-xavier", "error-shrinks-4.3-per-layer"),
            text="sigmoid with Xavier: the error shrinks by a factor of about {published:g} per "
                 "layer (tolerance {tol:g})",
            measured="measured {measured:.2f} per layer (predicted {predicted:.2f})",
            check=within(shrink["measured"], shrink["published"], shrink["tol"]),
            source="handbook", where=CHECKING, numbers=shrink, quoted=("published",)),
        ClaimSpec(
            id=claim_id(NAME, "relu-xavier", "flat-gradients"),
            text="ReLU with Xavier: per-example weight gradients flat across layers (max/min at "
                 "most {flat_max:g}), about 2^-10 times He's (within a factor {factor:g})",
            measured="max/min over hidden layers {flat:.2f}; Xavier/He {ratio:.2e} "
                     "(2^-10 = {ratio_published:.2e})",
            check=all_of(le(flat["flat"], flat["flat_max"]),
                         within_factor(flat["ratio"], flat["ratio_published"], flat["factor"])),
            source="handbook", where=CHECKING, numbers=flat),
        ClaimSpec(
            id=claim_id(NAME, "all", "recursion-follows-measured"),
            text="the recursion's predictions follow the measured per-layer sizes closely (one "
                 "network per setting, so finite-width scatter remains; median factor at most "
                 "{max_median:g})",
            measured="median measured/predicted factor per setting at most {median:.2f}; worst "
                     "single layer {worst:.2f}",
            check=le(follows["median"], follows["max_median"]),
            source="handbook", where=CHECKING, numbers=follows),
    ]
