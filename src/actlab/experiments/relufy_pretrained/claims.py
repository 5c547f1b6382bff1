"""The claims of the ``relufy-pretrained`` experiment (Table 3), read from its summary."""

from __future__ import annotations

from actlab.runner.claims import claim_id
from actlab.runner.experiment import Claim

NAME = "relufy-pretrained"
SOURCE = "seed 003 §5, Table 3"


def claims(summary: dict) -> list[Claim]:
    """Table 3's statements, checked on this model."""
    stages = summary["stages"]
    out: list[Claim] = []
    if "relu_finetuned" not in stages:
        return [Claim("fine-tune finished", "diverged", False, SOURCE,
                      id=claim_id(NAME, "model", "fine-tune-finished"))]
    tuned, swap = stages["relu_finetuned"], stages["relu"]
    out.append(Claim("ReLUfication yields 55-74% post-activation sparsity",
                     f"{tuned['sparsity']:.3f} after fine-tune ({swap['sparsity']:.3f} at swap)",
                     bool(0.55 <= tuned["sparsity"] <= 0.74), SOURCE,
                     id=claim_id(NAME, "model", "sparsity-in-published-range"),
                     value=tuned["sparsity"], comparison="compound", threshold=0.55))
    gap = abs(tuned["sparsity"] - tuned["preact_neg_frac"])
    out.append(Claim("the resulting sparsity closely matches the share of negative "
                     "pre-activations (within 0.02)", f"|difference| {gap:.4f}",
                     bool(gap <= 0.02), SOURCE,
                     id=claim_id(NAME, "model", "sparsity-matches-negative-share"),
                     value=gap, comparison="<=", threshold=0.02))
    change = tuned["preact_neg_frac"] - stages["original"]["preact_neg_frac"]
    out.append(Claim("the share of negative pre-activations changes little after conversion "
                     "(within 0.05)", f"{change:+.4f}", bool(abs(change) <= 0.05), SOURCE,
                     id=claim_id(NAME, "model", "negative-share-changes-little"),
                     value=change, comparison="within", threshold=0.05, reference=0.0))
    out.append(Claim("a brief fine-tune recovers the original embedding (cosine rises)",
                     f"cosine {swap['cosine_to_original']:.4f} -> {tuned['cosine_to_original']:.4f}",
                     bool(tuned["cosine_to_original"] > swap["cosine_to_original"]), SOURCE,
                     id=claim_id(NAME, "model", "fine-tune-recovers-embedding"),
                     value=tuned["cosine_to_original"], comparison=">",
                     threshold=swap["cosine_to_original"]))
    return out
