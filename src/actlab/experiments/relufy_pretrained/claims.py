"""The claims of the ``relufy-pretrained`` experiment, read from its summary: the statements of
"Bug or Feature²" (long version) §5.1 on ReLUfication (Table 3), with tolerances of ours, and
two checks of our own (the fine-tune finished; it brings the embedding back).

Table 3 converts the authors' own GELU-trained classifiers with one epoch of fine-tuning; this
experiment applies its statements to a public pretrained language model (MiniLM), which the
paper did not convert. "The resulting sparsity closely matches" the negative share is true of
ReLU by construction (it zeroes exactly its negative inputs): a test of actlab
(``tests/test_pretrained.py``), not a claim.

Over seeds: every claim reads the fine-tuned model, whose fine-tune the seed draws (batches,
dropout), so none is deterministic (the original model and the bare swap are); each is paired
(one seed's stages share the fine-tune).
"""

from __future__ import annotations

from actlab.runner.claims import ClaimSpec, all_of, among, claim_id, ge, gt, judge_all, le, within
from actlab.runner.experiment import Claim

NAME = "relufy-pretrained"
PAPER = "bug-or-feature"
WHERE = "§5.1, Table 3"


def claims(summary: dict) -> list[Claim]:
    """Table 3's statements, checked on this model."""
    stages = summary["stages"]
    if "relu_finetuned" not in stages:
        return judge_all([ClaimSpec(
            id=claim_id(NAME, "model", "fine-tune-finished"), text="fine-tune finished",
            measured="diverged", check=among("diverged", ["finished"]), source="actlab")])
    tuned, swap = stages["relu_finetuned"], stages["relu"]
    n = {"sparsity_low": 0.55, "sparsity_high": 0.74,  # §5.1: "yields 55-74% ... sparsity"
         "change_tol": 0.05,  # ours: "changes little"
         "sparsity": tuned["sparsity"], "sparsity_swap": swap["sparsity"],
         "change": tuned["preact_neg_frac"] - stages["original"]["preact_neg_frac"],
         "cos_swap": swap["cosine_to_original"], "cos_tuned": tuned["cosine_to_original"]}
    return judge_all([
        ClaimSpec(
            id=claim_id(NAME, "model", "sparsity-in-published-range"),
            text="ReLUfication of this pretrained language model falls in Table 3's "
                 "{sparsity_low:.0%}-{sparsity_high:.0%} post-activation sparsity (measured there "
                 "on the authors' own GELU-trained classifiers after one epoch of fine-tuning)",
            measured="{sparsity:.3f} after fine-tune ({sparsity_swap:.3f} at swap)",
            check=all_of(ge(n["sparsity"], n["sparsity_low"]),
                         le(n["sparsity"], n["sparsity_high"])),
            source=PAPER, where=WHERE, numbers=n, quoted=("sparsity_low", "sparsity_high")),
        ClaimSpec(
            id=claim_id(NAME, "model", "negative-share-changes-little"),
            text="the share of negative pre-activations changes little after conversion "
                 "(within {change_tol:g})",
            measured="{change:+.4f}", check=within(n["change"], 0.0, n["change_tol"]),
            source=PAPER, where=WHERE, numbers=n),
        ClaimSpec(
            id=claim_id(NAME, "model", "fine-tune-recovers-embedding"),
            text="a brief fine-tune recovers the original embedding (cosine rises)",
            measured="cosine {cos_swap:.4f} -> {cos_tuned:.4f}",
            check=gt(n["cos_tuned"], n["cos_swap"]), source="actlab", numbers=n),
    ])
