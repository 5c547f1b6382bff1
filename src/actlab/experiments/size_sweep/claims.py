"""The claims of the ``size-sweep`` experiment, read from its summary."""

from __future__ import annotations

from actlab.runner.claims import claim_id
from actlab.runner.experiment import Claim


def claims(summary: dict) -> list[Claim]:
    """Shifting helps on average across sizes; optimal shifts concentrate near theory."""
    rows = []
    mean = summary.get("mean_relative_improvement")
    grid = summary.get("grid", {})
    if mean is not None:
        helped = sum(1 for c in grid.values() if c["relative_improvement"] > 0)
        rows.append(Claim(
            "shifting lowers the final loss across (d, m, L)",
            f"mean relative improvement {100 * mean:.1f}%; better in {helped}/{len(grid)} cells",
            bool(mean > 0 and helped > len(grid) / 2),
            "000 App. C.1, Fig. 12", id=claim_id("size-sweep", "all", "shift-lowers-final-loss"),
            value=mean, comparison="compound", threshold=0.0,
        ))
    optimal = summary.get("optimal_shift", {})
    if len(optimal) >= 2:
        sizes = list(optimal)
        first, last = optimal[sizes[0]], optimal[sizes[-1]]
        rows.append(Claim(
            "optimal shifts concentrate near theory as the model grows",
            f"mean |b* - b_theory|: {first['mean_abs_distance_to_theory']:.3f} ({sizes[0]}) -> "
            f"{last['mean_abs_distance_to_theory']:.3f} ({sizes[-1]})",
            bool(last["mean_abs_distance_to_theory"] <= first["mean_abs_distance_to_theory"]),
            "000 App. C.2, Fig. 13",
            id=claim_id("size-sweep", "all", "optimal-shifts-concentrate-near-theory"),
            value=last["mean_abs_distance_to_theory"], comparison="<=",
            threshold=first["mean_abs_distance_to_theory"],
        ))
    return rows
