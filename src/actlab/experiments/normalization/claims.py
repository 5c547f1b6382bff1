"""The claims of the ``normalization`` experiment: the handbook's gradient norms next to ours.

The published norms are those of the handbook page "Activations and initialization",
"Normalization and residual connections"; the factor-of-3 tolerances are ours (one random
network each).
"""

from __future__ import annotations

from actlab.runner.claims import (
    ClaimSpec,
    all_of,
    claim_id,
    ge,
    gt,
    judge_all,
    le,
    within_factor,
)
from actlab.runner.experiment import Claim

NAME = "normalization"
WHERE = "Normalization and residual connections"
FACTOR = 3.0  # ours: one random network per setting
# The handbook's (first, last) hidden-layer norms where it gives them.
PUBLISHED = {
    ("tanh-std0.01", "plain"): (4.1e-23, None),
    ("tanh-std0.01", "batch-norm"): (2.08, None),
    ("tanh-std0.01", "layer-norm"): (1.75, None),
    ("tanh-std0.01", "residual"): (4.3e-2, None),
    ("relu-2he", "plain"): (1.9e11, 1.2e12),
    ("relu-2he", "residual"): (9.5e15, 2.2e17),
}
NORMALIZED_RANGE = (0.49, 26.5)  # ReLU at 2 x He with batch or layer norm, first and last


def claims(summary: dict) -> list[Claim]:
    """Published norms within a factor of 3 (one random network each), and the ordering."""
    specs = []
    for (stack, variant), (first, last) in PUBLISHED.items():
        got = summary[stack][variant]
        n = {"first": first, "last": last, "factor": FACTOR,
             "m_first": got["first"], "m_last": got["last"]}
        text, measured = "{first:.3g}", "{m_first:.3g}"
        check = within_factor(n["m_first"], first, FACTOR)
        if last is not None:
            text, measured = text + ", last {last:.3g}", measured + ", {m_last:.3g}"
            check = all_of(check, within_factor(n["m_last"], last, FACTOR))
        specs.append(ClaimSpec(
            id=claim_id(NAME, stack, variant, "norms-match-handbook"),
            text=f"{stack} {variant}: first-layer norm " + text + " (within a factor of {factor:g})",
            measured=measured, check=check, source="handbook", where=WHERE, numbers=n,
            quoted=("first",) if last is None else ("first", "last")))

    normed = [summary["relu-2he"][v][k] for v in ("batch-norm", "layer-norm")
              for k in ("first", "last")]
    n = {"lo": NORMALIZED_RANGE[0], "hi": NORMALIZED_RANGE[1], "factor": FACTOR,
         "m_lo": min(normed), "m_hi": max(normed)}
    specs.append(ClaimSpec(
        id=claim_id(NAME, "relu-2he", "normed", "norms-in-range"),
        text="relu-2he with batch or layer norm: norms between {lo} and {hi} (range widened "
             "{factor:g}x each way)",
        measured="{m_lo:.3g}..{m_hi:.3g}",
        check=all_of(le(n["m_hi"], n["hi"] * FACTOR), ge(n["m_lo"], n["lo"] / FACTOR)),
        source="handbook", where=WHERE, numbers=n, quoted=("lo", "hi")))

    plain, res = summary["relu-2he"]["plain"], summary["relu-2he"]["residual"]
    n = {"res_first": res["first"], "res_last": res["last"],
         "plain_first": plain["first"], "plain_last": plain["last"]}
    specs.append(ClaimSpec(
        id=claim_id(NAME, "relu-2he", "residual", "norms-larger"),
        text="relu-2he: residual blocks alone make the norms larger still",
        measured="residual {res_first:.3g}/{res_last:.3g} vs plain "
                 "{plain_first:.3g}/{plain_last:.3g}",
        check=all_of(gt(n["res_last"], n["plain_last"]), gt(n["res_first"], n["plain_first"])),
        source="handbook", where=WHERE, numbers=n))
    return judge_all(specs)
