"""The claims of the ``lm-shift`` experiment, read from its summary."""

from __future__ import annotations

import numpy as np

from actlab.runner.claims import claim_id
from actlab.runner.experiment import Claim

NAME = "lm-shift"
SOURCE = "seed 000 §4.3, App. E"


def claims(summary: dict) -> list[Claim]:
    """Shift lowers the final loss; early lead of the unshifted model; smaller overshoot."""
    out = []
    for act, s in summary["per_activation"].items():
        res = s["residual_final"]
        out.append(Claim(
            f"{act}: adaptive shifting lowers the final validation loss "
            "(GPT-2 Small: by about 0.01)",
            f"residual {res:+.4f} (sd over seeds {s['residual_final_sd']:.4f}; "
            f"{s['seeds_shift_better']}/{s['n_seeds']} seeds better)",
            bool(np.isfinite(res) and res < 0), SOURCE,
            id=claim_id(NAME, act, "shift-lowers-final-loss"), value=res,
            comparison="<", threshold=0.0))
        early = s["residual_early"]
        out.append(Claim(
            f"{act}: the unshifted model leads early (controlled model §2.2; "
            "§5 notes GPT-2 Small did not show this)",
            f"early residual {early:+.4f} at step {s['early_step']}",
            bool(np.isfinite(early) and early > 0), "seed 000 §2.2, §5",
            id=claim_id(NAME, act, "unshifted-leads-early"), value=early,
            comparison=">", threshold=0.0))
        ou, os_ = s["overshoot_unshifted"], s["overshoot_shifted"]
        out.append(Claim(
            f"{act}: shifting suppresses the hidden-state overshoot",
            f"overshoot {os_:.4f} shifted vs {ou:.4f} unshifted (mean over blocks, seeds)",
            bool(np.isfinite(ou) and np.isfinite(os_) and os_ < ou), "seed 000 §4.1, App. E.2",
            id=claim_id(NAME, act, "shift-suppresses-overshoot"), value=os_,
            comparison="<", threshold=ou))
    return out
