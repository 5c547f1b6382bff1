"""The claims of ``lm-drift``: the drift of "Bug or Feature²" §2-3 under AdamW, and Muon's
share of mean drift against AdamW's (our prediction).

Over seeds both are paired (the default): the drift claim compares one run's start with its
end, and the Muon and AdamW arms of a seed start from the same initial weights (the same GPT
config and seed; only the optimizer differs) and see the same batches. None is deterministic:
all read trained models."""

from __future__ import annotations

from actlab.runner.claims import ClaimSpec, all_of, claim_id, gt, judge_all, lt
from actlab.runner.experiment import Claim

NAME = "lm-drift"


def claims(summary: dict) -> list[Claim]:
    """Per activation run under both optimizers: AdamW drifts negative and raises the negative
    share (§2-3); Muon's movement holds a smaller share of mean drift (ours)."""
    arms = summary.get("arms", {})
    specs = []
    for act in summary.get("activations", []):
        adamw, muon = arms.get(f"adamw/{act}"), arms.get(f"muon/{act}")
        if adamw and "w_mean" in adamw and "preact_neg_frac" in adamw:
            n = {"shift": adamw["w_mean"]["change"],
                 "neg_start": adamw["preact_neg_frac"]["start"],
                 "neg_end": adamw["preact_neg_frac"]["end"]}
            specs.append(ClaimSpec(
                id=claim_id(NAME, "adamw", act, "negative-drift"),
                text=f"under AdamW the up-projection weights of the {act} GPT drift negative and "
                     "the share of negative pre-activations rises",
                measured="weight mean change {shift:+.2e}; negative share {neg_start:.3f} -> "
                         "{neg_end:.3f}",
                check=all_of(lt(n["shift"], 0.0), gt(n["neg_end"], n["neg_start"])),
                source="bug-or-feature", where="§2-3, Fig. 2", numbers=n))
        if adamw and muon and "mean_drift_share" in adamw and "mean_drift_share" in muon:
            n = {"muon": muon["mean_drift_share"]["end"], "adamw": adamw["mean_drift_share"]["end"],
                 "muon_shift": muon["w_mean"]["change"], "adamw_shift": adamw["w_mean"]["change"]}
            specs.append(ClaimSpec(
                id=claim_id(NAME, "muon", act, "smaller-mean-drift-share"),
                text=f"Muon, orthogonalising each update, spends a smaller share of the {act} "
                     "GPT's up-projection movement on mean drift than AdamW (our prediction)",
                measured="|mean change| / mean |change|: Muon {muon:.3f} vs AdamW {adamw:.3f} "
                         "(mean change {muon_shift:+.2e} vs {adamw_shift:+.2e})",
                check=lt(n["muon"], n["adamw"]), source="actlab", where="", numbers=n))
    return judge_all(specs)
