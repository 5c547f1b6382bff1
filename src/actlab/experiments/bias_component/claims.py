"""The claims of ``bias-component``, read from its summary (seed 000 §3.2, App. D)."""

from __future__ import annotations

from actlab.runner.claims import claim_id, fmt_or_na
from actlab.runner.experiment import Claim

NAME = "bias-component"
# A rise or fall of the bias-only similarity counts when it exceeds this (correlation units);
# fixed before any run, as a plain "clearly more than noise between checkpoints" margin.
RISE_FALL_MARGIN = 0.05


def claims(summary: dict) -> list[Claim]:
    """Rise and fall of the unshifted bias-only similarity, shifted < unshifted, losses."""
    src = "seed 000 §3.2, Figs. 5, 18"
    u, s = summary.get("unshifted", {}), summary.get("shifted", {})
    claims: list[Claim] = []
    peak, first = u.get("similarity_peak"), u.get("similarity_first_trained")
    final, last_step = u.get("similarity_final"), u.get("final_step")
    if None not in (peak, first, final):
        rise = peak - first > RISE_FALL_MARGIN
        fall = peak - final > RISE_FALL_MARGIN and u.get("similarity_peak_step") != last_step
        claims.append(Claim(
            "unshifted: the bias-only reconstruction first approaches the full one, then "
            f"diverges from it (rise and fall each > {RISE_FALL_MARGIN} in correlation)",
            f"correlation {fmt_or_na(first)} (step {u.get('first_trained_step')}) -> peak "
            f"{fmt_or_na(peak)} (step {u.get('similarity_peak_step')}) -> {fmt_or_na(final)} "
            f"(step {last_step})", bool(rise and fall), src,
            id=claim_id(NAME, "unshifted", "bias-similarity-rises-and-falls"),
            value=peak - final, comparison="compound", threshold=RISE_FALL_MARGIN))
    if u.get("similarity_peak") is not None and s.get("similarity_peak") is not None:
        claims.append(Claim(
            "shifted: the bias component carries less image content (lower peak "
            "similarity of bias-only to full reconstruction)",
            f"peak correlation {fmt_or_na(s['similarity_peak'])} shifted vs "
            f"{fmt_or_na(u['similarity_peak'])} unshifted" + _scale_aware_text(s, u),
            s["similarity_peak"] < u["similarity_peak"], src,
            id=claim_id(NAME, "shifted", "lower-bias-peak-similarity"),
            value=s["similarity_peak"], comparison="<", threshold=u["similarity_peak"]))
    early = summary.get("loss_residual_early")
    if early is not None:
        claims.append(Claim(
            "shifted model has a higher reconstruction loss early in training",
            f"loss residual (shifted - unshifted) {fmt_or_na(early)} at step "
            f"{summary.get('early_step')}", early > 0, "seed 000 App. D, Fig. 17",
            id=claim_id(NAME, "shifted", "higher-early-loss"), value=early,
            comparison=">", threshold=0.0))
    fu, fs = summary.get("final_loss_unshifted"), summary.get("final_loss_shifted")
    if fu is not None and fs is not None:
        claims.append(Claim(
            "shifted model reaches a lower final reconstruction loss",
            f"test MSE {fmt_or_na(fs, 4)} shifted vs {fmt_or_na(fu, 4)} unshifted", fs < fu,
            "seed 000 App. D, Fig. 17", id=claim_id(NAME, "shifted", "lower-final-loss"),
            value=fs, comparison="<", threshold=fu))
    return claims


def _scale_aware_text(shifted: dict, unshifted: dict) -> str:
    """The scale-aware measures beside the correlation (final R² and energy of the bias-only
    decode against the full decode), when the summary has them."""
    keys = ("bias_r2_final", "bias_energy_final")
    if any(shifted.get(k) is None or unshifted.get(k) is None for k in keys):
        return ""
    return (f"; at the end, R² of bias-only vs full {fmt_or_na(shifted['bias_r2_final'])} shifted vs "
            f"{fmt_or_na(unshifted['bias_r2_final'])} unshifted, energy "
            f"{fmt_or_na(shifted['bias_energy_final'])} vs {fmt_or_na(unshifted['bias_energy_final'])}")
