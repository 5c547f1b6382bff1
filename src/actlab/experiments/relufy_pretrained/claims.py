"""The claims of the ``relufy-pretrained`` experiment, read from its summary: the statements of
"Bug or Feature²" (long version) §5.1 on ReLUfication (Table 3), with tolerances of ours, and
two checks of our own (the fine-tune finished; it brings the embedding back).

Table 3 converts the authors' own GELU-trained classifiers with one epoch of fine-tuning; this
experiment applies its statements to a public pretrained language model (MiniLM), which the
paper did not convert.
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
         "match_tol": 0.02, "change_tol": 0.05,  # ours: "closely matches", "changes little"
         "sparsity": tuned["sparsity"], "sparsity_swap": swap["sparsity"],
         "gap": abs(tuned["sparsity"] - tuned["preact_neg_frac"]),
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
            id=claim_id(NAME, "model", "sparsity-matches-negative-share"),
            text="the resulting sparsity closely matches the share of negative pre-activations "
                 "(within {match_tol:g})",
            measured="|difference| {gap:.4f}", check=le(n["gap"], n["match_tol"]),
            source=PAPER, where=WHERE, numbers=n),
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
