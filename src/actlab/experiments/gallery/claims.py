"""The claims of the ``gallery``: published tables reproduced, and the recursion example's statements."""

from __future__ import annotations

import math

from actlab.runner.claims import claim_id
from actlab.runner.experiment import Claim

NAME = "gallery"


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
    checked = {k: v for k, v in averages.items() if "published" in v}
    missed = sorted(k for k, v in checked.items() if not v["matches"])
    out = [
        Claim("Gaussian averages (mean, E f², E f'², gain) of the eight activations, 4 decimals",
              f"{len(checked) - len(missed)}/{len(checked)} activations match"
              + (f"; differ: {', '.join(missed)}" if missed else ""),
              not missed and len(checked) == 8, "seed 001, Averages over a Gaussian net input",
              id=claim_id(NAME, "all", "averages-match-published"), value=len(missed),
              comparison="compound", threshold=0),
        Claim("theory shifts b at q = 1/3: ReLU 0.230, GELU 0.115, Swish 0.077, sigmoid 0.500, "
              "tanh 0",
              ", ".join(f"{k} {v['theory']:.3f}" for k, v in shifts.items()),
              all(v["matches"] for v in shifts.values()), "seed 000, Table 1 and App. A",
              id=claim_id(NAME, "all", "theory-shifts-match-published"),
              value=sum(not v["matches"] for v in shifts.values()), comparison="<=", threshold=0),
    ]
    same = [n for n in ("linear", "conv2d", "relu", "leaky_relu") if gains[n]["equal"]]
    out.append(Claim(
        "the fixed-point gain equals PyTorch's for linear, ReLU and leaky ReLU; tanh's is "
        "1.5925, close to PyTorch's 5/3",
        f"equal for {', '.join(same)}; tanh {gains['tanh']['fixed_point']:.4f} vs "
        f"{gains['tanh']['torch']:.4f}, sigmoid {gains['sigmoid']['fixed_point']:.4f} vs "
        f"{gains['sigmoid']['torch']:.4f}, selu {gains['selu']['fixed_point']:.4f} vs "
        f"{gains['selu']['torch']:.4f}",
        len(same) == 4 and round(gains["tanh"]["fixed_point"], 4) == 1.5925,
        "seed 001, A gain for any activation", id=claim_id(NAME, "all", "fixed-point-gains"),
        value=gains["tanh"]["fixed_point"], comparison="compound", threshold=1.5925))
    he = rec["ReLU, He"]
    he_spread = max(_spread(he["measured_activation_second_moment"][:-1]),
                    _spread(he["measured_error_variance"][:-1]))
    out.append(Claim(
        "ReLU with He: forward and backward sizes stay within a factor of two across all 20 "
        "layers", f"measured max/min of the std over hidden layers {he_spread:.2f}",
        he_spread <= 2.0, "seed 001, Checking the predictions",
        id=claim_id(NAME, "relu-he", "sizes-within-factor-two"), value=he_spread,
        comparison="<=", threshold=2.0))
    sig = rec["sigmoid, Xavier"]
    # Going back from layer 20 to layer 1 the error shrinks by the factor it grows forwards.
    measured_factor = _per_layer_factor(sig["measured_error_variance"][:-1])
    predicted_factor = _per_layer_factor(sig["predicted_error_variance"][:-1])
    out.append(Claim(
        "sigmoid with Xavier: the error shrinks by a factor of about 4.3 per layer",
        f"measured {measured_factor:.2f} per layer (predicted {predicted_factor:.2f})",
        abs(measured_factor - 4.3) <= 0.3, "seed 001, Checking the predictions",
        id=claim_id(NAME, "sigmoid-xavier", "error-shrinks-4.3-per-layer"), value=measured_factor,
        comparison="within", threshold=0.3, reference=4.3))
    xav = rec["ReLU, Xavier"]
    grads_x = xav["measured_weight_gradient_norm"][:-1]
    grads_he = he["measured_weight_gradient_norm"][:-1]
    ratio = math.exp(sum(math.log(a / b) for a, b in zip(grads_x, grads_he)) / len(grads_x))
    flat = max(grads_x) / min(grads_x)
    out.append(Claim(
        "ReLU with Xavier: per-example weight gradients flat across layers, about 2^-10 times "
        "He's", f"max/min over hidden layers {flat:.2f}; Xavier/He {ratio:.2e} "
        f"(2^-10 = {2**-10:.2e})", flat <= 2.0 and 0.5 <= ratio / 2**-10 <= 2.0,
        "seed 001, Checking the predictions", id=claim_id(NAME, "relu-xavier", "flat-gradients"),
        value=flat, comparison="compound", threshold=2.0))
    worst = max(v["worst_factor"] for v in rec.values())
    median = max(v["median_factor"] for v in rec.values())
    out.append(Claim(
        "the recursion's predictions follow the measured per-layer sizes closely (one network "
        "per setting, so finite-width scatter remains)",
        f"median measured/predicted factor per setting at most {median:.2f}; worst single "
        f"layer {worst:.2f}", median <= 1.25, "seed 001, Checking the predictions",
        id=claim_id(NAME, "all", "recursion-follows-measured"), value=median, comparison="<=",
        threshold=1.25))
    return out
