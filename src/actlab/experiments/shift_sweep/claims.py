"""The claims of the ``shift-sweep`` experiment, read from its summary."""

from __future__ import annotations

import numpy as np

from actlab.runner.claims import claim_id
from actlab.runner.experiment import Claim

# "near-optimal": the theory shift's mean final loss within this factor of the best shift's.
NEAR_OPTIMAL_RATIO = 1.10


def claims(summary: dict) -> list[Claim]:
    """Theory shift near-optimal per activation (mean final loss within 10% of the best)."""
    rows = []
    for activation, entry in summary.items():
        if not isinstance(entry, dict) or "loss_ratio_theory_vs_best" not in entry:
            continue
        ratio = entry["loss_ratio_theory_vs_best"]
        rows.append(Claim(
            f"theory shift is near-optimal ({activation})",
            f"loss(theory {entry['theory_shift']:.3f}) / loss(best) = {ratio:.3f}; "
            f"median per-seed best shift {entry['best_shift_median']:.3f} "
            f"(held: ratio <= {NEAR_OPTIMAL_RATIO})",
            bool(np.isfinite(ratio) and ratio <= NEAR_OPTIMAL_RATIO),
            "000 App. A.2, Fig. 9", id=claim_id("shift-sweep", activation, "theory-shift-near-optimal"),
            value=ratio, comparison="<=", threshold=NEAR_OPTIMAL_RATIO,
        ))
    return rows
