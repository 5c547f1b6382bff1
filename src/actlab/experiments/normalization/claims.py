"""The claims of the ``normalization`` experiment: the handbook's gradient norms next to ours."""

from __future__ import annotations

import math

from actlab.runner.claims import claim_id
from actlab.runner.experiment import Claim

NAME = "normalization"
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


def _within(value: float, target: float, factor: float = 3.0) -> bool:
    return math.isfinite(value) and target / factor <= value <= target * factor


def claims(summary: dict) -> list[Claim]:
    """Published norms within a factor of 3 (one random network each), and the ordering."""
    src = "seed 001, Normalization and residual connections"
    out = []
    for (stack, variant), (first, last) in PUBLISHED.items():
        got = summary[stack][variant]
        held = _within(got["first"], first) and (last is None or _within(got["last"], last))
        text = f"{stack} {variant}: first-layer norm {first:.2g}"
        measured = f"{got['first']:.3g}"
        if last is not None:
            text += f", last {last:.2g}"
            measured += f", {got['last']:.3g}"
        out.append(Claim(text + " (within a factor of 3)", measured, held, src,
                         id=claim_id(NAME, stack, variant, "norms-match-handbook"),
                         value=got["first"], comparison="compound", threshold=3.0,
                         reference=first))
    normed = [summary["relu-2he"][v][k] for v in ("batch-norm", "layer-norm")
              for k in ("first", "last")]
    lo, hi = NORMALIZED_RANGE
    out.append(Claim(f"relu-2he with batch or layer norm: norms between {lo} and {hi} "
                     "(range widened 3x each way)", f"{min(normed):.3g}..{max(normed):.3g}",
                     min(normed) >= lo / 3 and max(normed) <= hi * 3, src,
                     id=claim_id(NAME, "relu-2he", "normed", "norms-in-range"),
                     value=max(normed), comparison="compound", threshold=hi * 3))
    plain, res = summary["relu-2he"]["plain"], summary["relu-2he"]["residual"]
    out.append(Claim("relu-2he: residual blocks alone make the norms larger still",
                     f"residual {res['first']:.3g}/{res['last']:.3g} vs plain "
                     f"{plain['first']:.3g}/{plain['last']:.3g}",
                     res["first"] > plain["first"] and res["last"] > plain["last"], src,
                     id=claim_id(NAME, "relu-2he", "residual", "norms-larger"),
                     value=res["last"], comparison="compound", threshold=plain["last"]))
    return out
