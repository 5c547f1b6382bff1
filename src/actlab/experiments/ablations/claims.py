"""The claims of the ``ablations`` experiment, read from its summary.

"Rethinking Activation Functions" App. C.3 (Fig. 14) states that the shifted model reaches a
lower loss under post-norm, trainable biases and soft-target cross-entropy; the majority-of-
seeds condition is ours (the one of ``teacher-student``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from actlab.experiments.teacher_student.claims import MAJORITY
from actlab.runner.claims import ClaimSpec, all_of, claim_id, gt, judge_all, lt

if TYPE_CHECKING:
    from actlab.runner.experiment import Claim


def claims(summary: dict) -> list[Claim]:
    """The shifted student ends lower in every variant."""
    specs = []
    for variant, entry in summary.items():
        if not isinstance(entry, dict) or entry.get("final_loss_shifted") is None:
            continue
        n = {"variant": variant.replace("_", " "), "majority": MAJORITY,
             "fu": entry["final_loss_unshifted"], "fs": entry["final_loss_shifted"],
             "wins": entry["shifted_wins"]}
        # The unchanged set-up is the paper's main experiment (§2.2), not an ablation.
        where = "§2.2, Fig. 2" if variant == "baseline" else "App. C.3, Fig. 14"
        specs.append(ClaimSpec(
            id=claim_id("ablations", variant, "shifted-ends-lower"),
            text="shifted student ends lower under {variant}: lower mean final loss, and lower "
                 "in more than {majority:.0%} of the paired seeds",
            measured="final loss {fs:.4g} vs {fu:.4g} unshifted; shifted wins {wins:.0%} of seeds",
            check=all_of(lt(n["fs"], n["fu"]), gt(n["wins"], MAJORITY)),
            source="rethinking", where=where, numbers=n))
    return judge_all(specs)
