"""The ``signal`` experiment's summary: per-layer series of the first seed and headline ratios."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from actlab.experiments.signal import SignalConfig

# name -> (activation, scheme, gain or None, fixed std or None)
PROFILE_SETTINGS: dict[str, tuple[str, str, float | None, float | None]] = {
    "sigmoid-xavier": ("sigmoid", "xavier", None, None),
    "relu-he": ("relu", "he", None, None),
    "relu-xavier": ("relu", "xavier", None, None),
    "relu-1.5he": ("relu", "he", 1.5 * math.sqrt(2.0), None),
}
HISTOGRAM_SETTINGS: dict[str, tuple[str, str, float | None, float | None]] = {
    "tanh-std0.01": ("tanh", "std", None, 0.01),
    "tanh-std0.2": ("tanh", "std", None, 0.2),
    "tanh-xavier": ("tanh", "xavier", None, None),
    "relu-xavier": ("relu", "xavier", None, None),
    "relu-he": ("relu", "he", None, None),
    "relu-1.41he": ("relu", "he", 2.0, None),
}
SATURATION_SETTINGS: dict[str, tuple[str, str, float | None, float | None]] = {
    "tanh-xavier": ("tanh", "xavier", None, None),
    "tanh-xavier-5/3": ("tanh", "xavier", 5.0 / 3.0, None),
    "tanh-fixed-point": ("tanh", "fixed-point", None, None),
}
PROFILE_METRICS = ("activation_std", "net_input_std", "error_rms", "per_example_grad_rms",
                   "batch_grad_norm")


def build_summary(config: SignalConfig, table: Any) -> dict:
    """Profiles, histogram stds and saturation of the first seed, with the headline ratios."""
    seed = int(table["seed"].min())
    rows = table[table["seed"] == seed]

    def series(run: str, metric: str) -> list[float]:
        sel = rows[(rows["run"] == run) & (rows["metric"] == metric)].copy()
        sel["l"] = sel["layer"].astype(int)
        return sel.sort_values("l")["value"].tolist()

    summary: dict = {"seed": seed, "profiles": {}, "histograms": {}, "saturation": {}}
    depth = config.depth
    for run in PROFILE_SETTINGS:
        entry = {metric: series(f"profile/{run}", metric) for metric in PROFILE_METRICS}
        entry.update({f"predicted_{m}": series(f"profile/{run}", f"predicted_{m}")
                      for m in PROFILE_METRICS if m != "batch_grad_norm"})
        errors = entry["error_rms"]
        entry["error_factor_per_layer"] = (errors[-1] / errors[0]) ** (1 / (depth - 1))
        grads = entry["per_example_grad_rms"]
        entry["first_over_last_grad"] = grads[0] / grads[-1]
        entry["per_example_grad_range"] = [min(entry["per_example_grad_rms"]),
                                           max(entry["per_example_grad_rms"])]
        entry["max_abs_log10_error_of_prediction"] = {
            m: max(abs(math.log10(a / b)) for a, b in
                   zip(entry[m], entry[f"predicted_{m}"]))
            for m in ("net_input_std", "activation_std", "error_rms", "per_example_grad_rms")
        }
        summary["profiles"][run] = entry
    for run in HISTOGRAM_SETTINGS:
        summary["histograms"][run] = {
            "activation_std": series(f"histograms/{run}", "activation_std"),
            "share_beyond_0.99": series(f"histograms/{run}", "saturated_share"),
        }
    for run in SATURATION_SETTINGS:
        summary["saturation"][run] = {
            "net_input_std_last": series(f"saturation/{run}", "net_input_std")[-1],
            "predicted_net_input_std_last":
                series(f"saturation/{run}", "predicted_net_input_std")[-1],
            "saturated_share_last": series(f"saturation/{run}", "saturated_share")[-1],
        }
    return summary
