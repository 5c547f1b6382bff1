"""The claims of the ``relufication`` experiment, read from its summary."""

from __future__ import annotations

from actlab.runner.claims import claim_id
from actlab.runner.experiment import Claim


def claims(summary: dict) -> list[Claim]:
    """Accuracy drop < 2 pp, sparsity 55-74%, sparsity close to the negative share."""
    out = []
    src = "seed 003 §5.1, Table 3"
    for model, e in summary.get("models", {}).items():
        if e.get("accuracy_drop_pp") is None or e.get("after_sparsity") is None:
            continue
        out.append(Claim(f"{model}: ReLUfication costs < 2 pp accuracy",
                         f"{e['before_accuracy']:.3f} -> {e['after_accuracy']:.3f} "
                         f"({e['accuracy_drop_pp']:+.1f} pp)", e["accuracy_drop_pp"] < 2.0, src,
                         id=claim_id("relufication", model, "accuracy-drop-below-2pp"),
                         value=e["accuracy_drop_pp"], comparison="<", threshold=2.0))
        out.append(Claim(f"{model}: sparsity after ReLUfication in the published 55-74% range",
                         f"{e['after_sparsity']:.3f}", 0.55 <= e["after_sparsity"] <= 0.74, src,
                         id=claim_id("relufication", model, "sparsity-in-published-range"),
                         value=e["after_sparsity"], comparison="compound", threshold=0.55))
        if e.get("after_neg_frac") is not None:
            gap = abs(e["after_sparsity"] - e["after_neg_frac"])
            out.append(Claim(f"{model}: sparsity after conversion matches the negative share "
                             "(|diff| < 0.05)", f"{e['after_sparsity']:.3f} vs {e['after_neg_frac']:.3f}",
                             gap < 0.05, src,
                             id=claim_id("relufication", model, "sparsity-matches-negative-share"),
                             value=gap, comparison="<", threshold=0.05))
    return out
