"""The ``gallery``'s summary: its tables read from the tidy table, next to the published ones."""

from __future__ import annotations

import math
import statistics
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from actlab.experiments.gallery import GalleryConfig

# The handbook page "Activations and initialization", "Averages over a Gaussian net input":
# mean, E f², E f'², gain (z ~ N(0, 1)).
PUBLISHED_AVERAGES = {
    "sigmoid": (0.5000, 0.2934, 0.0448, 1.8462),
    "tanh": (0.0, 0.3943, 0.4644, 1.5925),
    "relu": (0.3989, 0.5000, 0.5000, 1.4142),
    "leaky_relu": (0.3950, 0.50005, 0.50005, 1.4141),
    "elu": (0.1605, 0.6449, 0.6681, 1.2452),
    "gelu": (0.2821, 0.4252, 0.4559, 1.5335),
    "silu": (0.2066, 0.3558, 0.3795, 1.6765),
    "softplus": (0.8061, 0.9212, 0.2934, 1.0419),
}
AVERAGE_KEYS = ("mean", "second_moment", "slope_second_moment", "gain")
# "Rethinking Activation Functions", Table 1 (tanh from App. A.1, eq. 19): b = E f(Z),
# Z ~ N(0, 1/3), three decimals.
PUBLISHED_SHIFTS = {"relu": 0.230, "gelu": 0.115, "swish": 0.077, "sigmoid": 0.500, "tanh": 0.0}
# Nonlinearities both conventions support: torch.nn.init.calculate_gain vs the fixed point.
GAIN_NAMES = ("linear", "conv2d", "relu", "leaky_relu", "tanh", "sigmoid", "selu")
# The handbook's "Checking the predictions": (label, activation, scheme, gain multiplier).
RECURSION_SETTINGS = (
    ("sigmoid, Xavier", "sigmoid", "xavier", 1.0),
    ("ReLU, He", "relu", "he", 1.0),
    ("ReLU, Xavier", "relu", "xavier", 1.0),
    ("ReLU, 1.5 x He", "relu", "he", 1.5),
)
RECURSION_FIELDS = ("net_input_variance", "activation_second_moment", "error_variance",
                    "weight_gradient_norm")
# Points of the graphs the documents state: (name, what, spec(s), search interval). "minimum"
# and "peak_slope" search the function and its slope; "tanh_gap" the largest |tanh-GELU - GELU|
# (an even function of z, so the negative half holds the point the handbook names);
# "saturation" where the slope falls below 0.01 for z > 0; "at_minus_one" the value and slope
# at z = -1.
LANDMARKS = (
    ("gelu_minimum", "minimum", "gelu", (-4.0, 0.0)),
    ("silu_minimum", "minimum", "silu", (-6.0, 0.0)),
    ("gelu_peak_slope", "peak_slope", "gelu", (0.0, 6.0)),
    ("silu_peak_slope", "peak_slope", "silu", (0.0, 8.0)),
    ("gelu_tanh_gap", "tanh_gap", "gelu", (-10.0, 0.0)),
    ("sigmoid_saturation", "saturation", "sigmoid", (0.0, 20.0)),
    ("tanh_saturation", "saturation", "tanh", (0.0, 20.0)),
    ("silu_at_minus_one", "at_minus_one", "silu", (-1.0, -1.0)),
)
SATURATION_SLOPE = 0.01  # the handbook's "drops below 0.01"


def build_summary(config: GalleryConfig, table: Any) -> dict:
    """The tables as nested dicts: averages, shifts, gains, the recursion check and the
    landmarks of the graphs."""
    return {
        "averages": read_averages(table),
        "shifts": read_shifts(table, config.q_shift),
        "gains": read_gains(table),
        "recursion": read_recursion(table),
        "landmarks": read_landmarks(table),
    }


def read_landmarks(table: Any) -> dict:
    """``{landmark: {"at": z, "value": ...}}`` (``at_minus_one``: value and slope at -1)."""
    out = {}
    for name, *_ in LANDMARKS:
        rows = table[table["run"] == f"landmarks/{name}"]
        if len(rows):
            out[name] = {m: float(v) for m, v in zip(rows["metric"], rows["value"])}
    return out


def _metric(table: Any, run: str, metric: str, layer: str = "") -> float:
    rows = table[(table["run"] == run) & (table["metric"] == metric) & (table["layer"] == layer)]
    return float(rows["value"].iloc[0])


def read_averages(table: Any) -> dict:
    """Gaussian averages per activation, with the published ones and whether they match."""
    runs = sorted(r for r in table["run"].unique() if r.startswith("averages/"))
    out = {}
    for run in runs:
        spec = run.split("/", 1)[1]
        entry = {key: _metric(table, run, key) for key in AVERAGE_KEYS}
        if spec in PUBLISHED_AVERAGES:
            published = dict(zip(AVERAGE_KEYS, PUBLISHED_AVERAGES[spec]))
            entry["published"] = published
            # Half a unit in the last published place: 5 decimals for leaky ReLU's moments.
            entry["matches"] = all(
                abs(entry[k] - published[k]) <= (5e-6 if spec == "leaky_relu" and "moment" in k
                                                 else 5e-5)
                for k in AVERAGE_KEYS
            )
        out[spec] = entry
    return out


def read_shifts(table: Any, q: float) -> dict:
    """Theory shifts at ``q`` next to Table 1 (three decimals)."""
    out = {}
    for spec, published in PUBLISHED_SHIFTS.items():
        value = _metric(table, f"shift/{spec}", "shift")
        out[spec] = {"q": q, "theory": value, "paper": published,
                     "matches": round(value, 3) == published}
    return out


def read_gains(table: Any) -> dict:
    """Fixed-point gains next to ``torch.nn.init.calculate_gain``."""
    out = {}
    for name in GAIN_NAMES:
        ours, theirs = (_metric(table, f"gain/{name}", m) for m in ("fixed_point", "torch"))
        out[name] = {"fixed_point": ours, "torch": theirs, "equal": abs(ours - theirs) <= 1e-12}
    return out


def read_recursion(table: Any) -> dict:
    """Predicted and measured per-layer sizes per setting, and their worst/median factor."""
    out = {}
    for label, *_ in RECURSION_SETTINGS:
        run = f"recursion/{label}"
        rows = table[table["run"] == run]
        entry = {}
        for kind in ("predicted", "measured"):
            for field in RECURSION_FIELDS:
                sel = rows[rows["metric"] == f"{kind}_{field}"]
                sel = sel.assign(order=sel["layer"].astype(int)).sort_values("order")
                entry[f"{kind}_{field}"] = sel["value"].tolist()
        ratios = [
            abs(math.log(m / p))
            for field in RECURSION_FIELDS
            for m, p in zip(entry[f"measured_{field}"], entry[f"predicted_{field}"])
            if m > 0 and p > 0
        ]
        entry["worst_factor"] = math.exp(max(ratios)) if ratios else float("nan")
        entry["median_factor"] = math.exp(statistics.median(ratios)) if ratios else float("nan")
        out[label] = entry
    return out


def elementwise_activations() -> list[str]:
    """Registered activations with Gaussian averages (all of them are elementwise by name)."""
    from actlab.activations.registry import available_activations

    return list(available_activations())


def print_tables(summary: dict) -> None:
    """The three tables on stdout, theory next to the published values."""
    print("Gaussian averages at unit variance (theory | handbook)")
    for spec, entry in summary["averages"].items():
        line = "  ".join(f"{entry[k]:.5f}" for k in AVERAGE_KEYS)
        if "published" in entry:
            line += "  |  " + "  ".join(f"{entry['published'][k]:.5f}" for k in AVERAGE_KEYS)
        print(f"  {spec:<11} {line}")
    print("Shifts at q = 1/3 (theory | Table 1)")
    for spec, entry in summary["shifts"].items():
        print(f"  {spec:<8} {entry['theory']:.4f} | {entry['paper']:.3f}")
    print("Gains (fixed point | torch.nn.init.calculate_gain)")
    for name, entry in summary["gains"].items():
        print(f"  {name:<10} {entry['fixed_point']:.4f} | {entry['torch']:.4f}")
