"""The claims of ``lm-drift``, per normalisation and activation.

The paper's ("Bug or Feature²"):

* the down-projection's weights drift negative: App. C.2 signs a layer's expected update by
  its input, and the down-projection "receives a post-activation input" (positive for ReLU,
  positively biased for GELU), so its drift is the paper's prediction for a transformer.
  Judged under AdamW with both norms and under Muon with RMSNorm; Muon behind LayerNorm cannot
  move that mean (module docstring of :mod:`actlab.experiments.lm_drift`), so no claim there;
* the share of negative pre-activations rises over training (§1: "nearly 90%" sparsity in
  GPT-nano; Table 1's GPT rows), under both optimizers and norms.

Ours:

* the up-projection's weight mean falls under AdamW: its input comes from a norm, the case
  App. C.2 does not sign (centred under LayerNorm, whose "mean-centering ... suppresses"
  drift), so a fall there is our observation, not the paper's prediction;
* Muon spends a smaller share of the up-projection's movement on mean drift than AdamW.

Over seeds all are paired (the default): each compares one run's start with its end, or the
Muon and AdamW arms of a seed, which start from the same initial weights (the same GPT config
and seed; only the optimizer differs) and see the same batches. None is deterministic: all
read trained models."""

from __future__ import annotations

from actlab.runner.claims import ClaimSpec, claim_id, gt, judge_all, lt
from actlab.runner.experiment import Claim

NAME = "lm-drift"
NORM_NAMES = {"layernorm": "LayerNorm", "rmsnorm": "RMSNorm"}


def claims(summary: dict) -> list[Claim]:
    """Per norm and activation: the down-projection's negative drift and the rising negative
    share (the paper's); the up-projection's weight mean and Muon's mean-drift share (ours)."""
    arms = summary.get("arms", {})
    specs = []
    for norm in summary.get("norms", ["layernorm"]):
        for act in summary.get("activations", []):
            specs += _norm_act_specs(norm, act, {o: _arm(arms, norm, o, act)
                                                 for o in ("adamw", "muon")})
    return judge_all(specs)


def _arm(arms: dict, norm: str, optimizer: str, act: str) -> dict | None:
    """The arm of a norm, optimizer and activation. Runs kept before the norm arms existed
    trained one norm (their summary's ``norms``, LayerNorm when absent) and name their arms
    ``optimizer/activation``."""
    return arms.get(f"{norm}/{optimizer}/{act}", arms.get(f"{optimizer}/{act}"))


def _norm_act_specs(norm: str, act: str, arms: dict[str, dict | None]) -> list[ClaimSpec]:
    label = NORM_NAMES.get(norm, norm)
    specs = []
    for opt, arm in arms.items():
        if not arm:
            continue
        optimizer = {"adamw": "AdamW", "muon": "Muon"}[opt]
        if "down_w_mean" in arm and (opt == "adamw" or norm != "layernorm"):
            n = {"shift": arm["down_w_mean"]["change"]}
            specs.append(ClaimSpec(
                id=claim_id(NAME, norm, opt, act, "down-projection-drifts-negative"),
                text=f"under {optimizer} with {label} the down-projection weights of the {act} "
                     "GPT drift negative: their input is a post-activation",
                measured="down-projection weight mean change {shift:+.2e}",
                check=lt(n["shift"], 0.0), source="bug-or-feature", where="App. C.2",
                numbers=n))
        if "preact_neg_frac" in arm:
            n = {"neg_start": arm["preact_neg_frac"]["start"],
                 "neg_end": arm["preact_neg_frac"]["end"]}
            specs.append(ClaimSpec(
                id=claim_id(NAME, norm, opt, act, "negative-share-rises"),
                text=f"under {optimizer} with {label} the share of negative pre-activations of "
                     f"the {act} GPT rises over training",
                measured="negative share {neg_start:.3f} -> {neg_end:.3f}",
                check=gt(n["neg_end"], n["neg_start"]), source="bug-or-feature",
                where="§1, Table 1", numbers=n))
        if opt == "adamw" and "w_mean" in arm:
            n = {"shift": arm["w_mean"]["change"]}
            specs.append(ClaimSpec(
                id=claim_id(NAME, norm, opt, act, "up-weight-mean-falls"),
                text=f"under AdamW with {label} the up-projection weight mean of the {act} GPT "
                     "falls (ours: its input comes from the norm, which App. C.2 does not sign)",
                measured="up-projection weight mean change {shift:+.2e}",
                check=lt(n["shift"], 0.0), source="actlab", where="", numbers=n))
    adamw, muon = arms.get("adamw"), arms.get("muon")
    if adamw and muon and "mean_drift_share" in adamw and "mean_drift_share" in muon:
        n = {"muon": muon["mean_drift_share"]["end"], "adamw": adamw["mean_drift_share"]["end"],
             "muon_shift": muon["w_mean"]["change"], "adamw_shift": adamw["w_mean"]["change"]}
        specs.append(ClaimSpec(
            id=claim_id(NAME, norm, "muon", act, "smaller-mean-drift-share"),
            text=f"with {label}, Muon, orthogonalising each update, spends a smaller share of the "
                 f"{act} GPT's up-projection movement on mean drift than AdamW (our prediction)",
            measured="|mean change| / mean |change|: Muon {muon:.3f} vs AdamW {adamw:.3f} "
                     "(mean change {muon_shift:+.2e} vs {adamw_shift:+.2e})",
            check=lt(n["muon"], n["adamw"]), source="actlab", where="", numbers=n))
    return specs
