"""The claims of the ``shift-sweep`` experiment, read from its summary.

"Rethinking Activation Functions" App. A.2 (Fig. 9) states that the theory shifts achieve
near-optimal final loss; what "near-optimal" means here (:data:`NEAR_OPTIMAL_RATIO`) is ours.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from actlab.runner.claims import ClaimSpec, claim_id, judge_all, le

if TYPE_CHECKING:
    from actlab.runner.experiment import Claim

# Ours: "near-optimal" is the theory shift's mean final loss within this factor of the best shift's.
NEAR_OPTIMAL_RATIO = 1.10


def claims(summary: dict) -> list[Claim]:
    """Theory shift near-optimal per activation (mean final loss within 10% of the best)."""
    specs = []
    for activation, entry in summary.items():
        if not isinstance(entry, dict) or "loss_ratio_theory_vs_best" not in entry:
            continue
        n = {"act": activation, "ratio": entry["loss_ratio_theory_vs_best"],
             "bound": NEAR_OPTIMAL_RATIO, "theory": entry["theory_shift"],
             "best_median": entry["best_shift_median"]}
        specs.append(ClaimSpec(
            id=claim_id("shift-sweep", activation, "theory-shift-near-optimal"),
            text="theory shift is near-optimal ({act}): its mean final loss at most {bound:.2f} "
                 "times that of the best shift of the grid",
            measured="loss(theory {theory:.3f}) / loss(best) = {ratio:.3f}; median per-seed best "
                     "shift {best_median:.3f}",
            check=le(n["ratio"], NEAR_OPTIMAL_RATIO),
            source="rethinking", where="App. A.2, Fig. 9", numbers=n))
    return judge_all(specs)
