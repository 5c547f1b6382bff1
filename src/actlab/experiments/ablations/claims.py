"""The claims of the ``ablations`` experiment, read from its summary."""

from __future__ import annotations

from actlab.runner.claims import claim_id
from actlab.runner.experiment import Claim


def claims(summary: dict) -> list[Claim]:
    """The shifted student ends lower in every variant."""
    rows = []
    for variant, entry in summary.items():
        if not isinstance(entry, dict) or entry.get("final_loss_shifted") is None:
            continue
        fu, fs, wins = (entry["final_loss_unshifted"], entry["final_loss_shifted"],
                        entry["shifted_wins"])
        rows.append(Claim(
            f"shifted student ends lower under {variant.replace('_', ' ')}",
            f"final loss {fs:.4g} vs {fu:.4g} unshifted; shifted wins {100 * (wins or 0):.0f}% of seeds",
            bool(fs < fu and (wins or 0) > 0.5),
            "000 App. C.3, Fig. 14", id=claim_id("ablations", variant, "shifted-ends-lower"),
            value=fs, comparison="compound", threshold=fu,
        ))
    return rows
