"""The claims of the ``gated-ffn`` experiment, read from its summary."""

from __future__ import annotations

import numpy as np

from actlab.runner.claims import claim_id
from actlab.runner.experiment import Claim

SOURCE = "seed 002, Controlled Selection; GLU and Gated FFNs"


def claims(summary: dict) -> list[Claim]:
    """Matched parameters and FLOPs, loss of gated vs plain, throughput, stability."""
    v = summary["variants"]
    plain = [k for k, s in v.items() if s["ffn"] == "plain"]
    gated = [k for k, s in v.items() if s["ffn"] != "plain"]
    out: list[Claim] = []
    if plain and gated:
        ref = v[plain[0]]["params"]
        worst = max(abs(v[k]["params"] - ref) / ref for k in gated)
        out.append(Claim("gated width g = 2m/3 (matched_width) gives equal parameter counts",
                         f"largest relative difference {worst:.2%} "
                         f"(widths {v[plain[0]]['hidden_width']} vs {v[gated[0]]['hidden_width']})",
                         bool(worst < 0.005), SOURCE,
                         id=claim_id("gated-ffn", "gated", "equal-parameter-counts"),
                         value=worst, comparison="<", threshold=0.005))
        ref_f = v[plain[0]]["ffn_flops_per_token"]
        worst_f = max(abs(v[k]["ffn_flops_per_token"] - ref_f) / ref_f for k in gated)
        out.append(Claim("at matched parameters the FFN FLOPs per token match too",
                         f"largest relative difference {worst_f:.2%}", bool(worst_f < 0.01),
                         SOURCE, id=claim_id("gated-ffn", "gated", "equal-ffn-flops"),
                         value=worst_f, comparison="<", threshold=0.01))
        best_g = min(gated, key=lambda k: mean_val_loss(v[k]))
        best_p = min(plain, key=lambda k: mean_val_loss(v[k]))
        out.append(Claim("a GLU variant beats the plain FFNs at matched parameters "
                         "(GLU Variants Improve Transformer, cited by the seed)",
                         f"best gated {best_g} {mean_val_loss(v[best_g]):.4f} vs best plain {best_p} "
                         f"{mean_val_loss(v[best_p]):.4f}", bool(mean_val_loss(v[best_g]) < mean_val_loss(v[best_p])),
                         SOURCE, id=claim_id("gated-ffn", "gated", "glu-beats-plain"),
                         value=mean_val_loss(v[best_g]), comparison="<", threshold=mean_val_loss(v[best_p])))
        base = summary["thresholds"]["baseline"]
        slower = [k for k in gated if v[k]["tokens_per_s"] < v[base]["tokens_per_s"]]
        out.append(Claim("equal FLOPs do not mean equal speed: gated FFNs run slower "
                         "(three projections and a product)",
                         f"{len(slower)}/{len(gated)} gated variants slower than {base} "
                         "(CPU timings on a shared machine)", bool(len(slower) == len(gated)),
                         SOURCE, id=claim_id("gated-ffn", "gated", "gated-runs-slower"),
                         value=len(slower), comparison=">=", threshold=len(gated)))
    failed = sum(s["failed_runs"] for s in v.values())
    out.append(Claim("all runs finish with a finite loss (stability threshold)",
                     f"{failed} failed runs", failed == 0, SOURCE,
                     id=claim_id("gated-ffn", "all", "runs-finish-finite"), value=failed,
                     comparison="<=", threshold=0))
    return out


def mean_val_loss(s: dict) -> float:
    """A variant's mean validation loss, +inf when it is not finite (so it never wins)."""
    value = s["val_loss"]["mean"]
    return value if np.isfinite(value) else float("inf")
