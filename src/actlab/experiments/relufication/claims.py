"""The claims of the ``relufication`` experiment, read from its summary ("Bug or Feature²"
§5.1, Table 3: the authors' own GELU-trained models converted to ReLU variants with one epoch
of fine-tuning, as here)."""

from __future__ import annotations

from actlab.runner.claims import ClaimSpec, all_of, claim_id, ge, judge_all, le, lt
from actlab.runner.experiment import Claim

PAPER = "bug-or-feature"
WHERE = "§5.1, Table 3"
# "ReLUfication yields 55-74% post-activation sparsity, while accuracy drops by less than 2
# percentage points" (§5.1)
PUBLISHED = {"sparsity_low": 0.55, "sparsity_high": 0.74, "max_drop_pp": 2.0}


def claims(summary: dict) -> list[Claim]:
    """Accuracy drop < 2 pp, sparsity 55-74%, sparsity close to the negative share."""
    specs = []
    for model, e in summary.get("models", {}).items():
        if e.get("accuracy_drop_pp") is None or e.get("after_sparsity") is None:
            continue
        n = {**PUBLISHED, "before": e["before_accuracy"], "after": e["after_accuracy"],
             "drop": e["accuracy_drop_pp"], "sparsity": e["after_sparsity"],
             "neg": e.get("after_neg_frac"), "tol": 0.05}
        specs.append(ClaimSpec(
            id=claim_id("relufication", model, "accuracy-drop-below-2pp"),
            text=f"{model}: ReLUfication costs < {{max_drop_pp:g}} pp accuracy",
            measured="{before:.3f} -> {after:.3f} ({drop:+.1f} pp)",
            check=lt(n["drop"], n["max_drop_pp"]), source=PAPER, where=WHERE, numbers=n,
            quoted=("max_drop_pp",)))
        specs.append(ClaimSpec(
            id=claim_id("relufication", model, "sparsity-in-published-range"),
            text=f"{model}: sparsity after ReLUfication in the published "
                 "{sparsity_low:.0%}-{sparsity_high:.0%} range",
            measured="{sparsity:.3f}",
            check=all_of(ge(n["sparsity"], n["sparsity_low"]),
                         le(n["sparsity"], n["sparsity_high"])),
            source=PAPER, where=WHERE, numbers=n, quoted=("sparsity_low", "sparsity_high")))
        if n["neg"] is not None:
            specs.append(ClaimSpec(
                id=claim_id("relufication", model, "sparsity-matches-negative-share"),
                text=f"{model}: sparsity after conversion matches the negative share "
                     "(|diff| < {tol:g})",
                measured="{sparsity:.3f} vs {neg:.3f}",
                check=lt(abs(n["sparsity"] - n["neg"]), n["tol"]), source=PAPER, where=WHERE,
                numbers=n))
    return judge_all(specs)
