"""The claims of ``bias-component``, read from its summary ("Rethinking Activation Functions"
§3.2 and App. D)."""

from __future__ import annotations

from actlab.runner.claims import ClaimSpec, all_of, claim_id, gt, judge_all, lt
from actlab.runner.experiment import Claim

NAME = "bias-component"
# A rise or fall of the bias-only similarity counts when it exceeds this (correlation units);
# fixed before any run, as a plain "clearly more than noise between checkpoints" margin.
RISE_FALL_MARGIN = 0.05


def _minus(a: float | None, b: float | None) -> float | None:
    """``a - b``; ``None`` when either is missing."""
    return None if a is None or b is None else a - b


def claims(summary: dict) -> list[Claim]:
    """Rise and fall of the unshifted bias-only similarity, shifted < unshifted, losses."""
    u, s = summary.get("unshifted", {}), summary.get("shifted", {})
    rise = {"margin": RISE_FALL_MARGIN,
            "first": u.get("similarity_first_trained"), "first_step": u.get("first_trained_step"),
            "peak": u.get("similarity_peak"), "peak_step": u.get("similarity_peak_step"),
            "final": u.get("similarity_final"), "final_step": u.get("final_step")}
    rise["fall"] = _minus(rise["peak"], rise["final"])
    rise["rise"] = _minus(rise["peak"], rise["first"])
    peaks = {"shifted": s.get("similarity_peak"), "unshifted": u.get("similarity_peak"),
             **{f"{m}_{name}": c.get(f"bias_{m}_final") for m in ("r2", "energy")
                for name, c in (("shifted", s), ("unshifted", u))}}
    early = {"residual": summary.get("loss_residual_early"), "step": summary.get("early_step")}
    final = {"shifted": summary.get("final_loss_shifted"),
             "unshifted": summary.get("final_loss_unshifted")}
    specs = [
        ClaimSpec(
            id=claim_id(NAME, "unshifted", "bias-similarity-rises-and-falls"),
            text="unshifted: the bias-only reconstruction first approaches the full one, then "
                 "diverges from it (rise and fall each > {margin} in correlation)",
            measured="correlation {first:.3g} (step {first_step}) -> peak {peak:.3g} (step "
                     "{peak_step}) -> {final:.3g} (step {final_step})",
            # the fall first (the claim's number), then the rise, and a peak before the end
            check=all_of(gt(rise["fall"], RISE_FALL_MARGIN), gt(rise["rise"], RISE_FALL_MARGIN),
                         lt(rise["peak_step"], rise["final_step"])),
            source="rethinking", where="§3.2, Fig. 5; App. D, Fig. 18", numbers=rise),
        ClaimSpec(
            id=claim_id(NAME, "shifted", "lower-bias-peak-similarity"),
            text="shifted: the bias component carries less image content (lower peak "
                 "similarity of bias-only to full reconstruction)",
            measured="peak correlation {shifted:.3g} shifted vs {unshifted:.3g} unshifted"
                     + _scale_aware_text(s, u),
            check=lt(peaks["shifted"], peaks["unshifted"]),
            source="rethinking", where="§3.2, Fig. 5; App. D, Fig. 18", numbers=peaks),
        ClaimSpec(
            id=claim_id(NAME, "shifted", "higher-early-loss"),
            text="shifted model has a higher reconstruction loss early in training",
            measured="loss residual (shifted - unshifted) {residual:.3g} at step {step}",
            check=gt(early["residual"], 0.0),
            source="rethinking", where="App. D, Fig. 17", numbers=early),
        ClaimSpec(
            id=claim_id(NAME, "shifted", "lower-final-loss"),
            text="shifted model reaches a lower final reconstruction loss",
            measured="test MSE {shifted:.4g} shifted vs {unshifted:.4g} unshifted",
            check=lt(final["shifted"], final["unshifted"]),
            source="rethinking", where="App. D, Fig. 17", numbers=final),
    ]
    return judge_all(specs)


def _scale_aware_text(shifted: dict, unshifted: dict) -> str:
    """The template of the scale-aware measures beside the correlation (final R² and energy of
    the bias-only decode against the full decode), when the summary has them."""
    keys = ("bias_r2_final", "bias_energy_final")
    if any(shifted.get(k) is None or unshifted.get(k) is None for k in keys):
        return ""
    return ("; at the end, R² of bias-only vs full {r2_shifted:.3g} shifted vs {r2_unshifted:.3g} "
            "unshifted, energy {energy_shifted:.3g} vs {energy_unshifted:.3g}")
