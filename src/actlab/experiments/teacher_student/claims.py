"""The claims of the ``teacher-student`` experiment, read from its summary.

Each is a statement of "Rethinking Activation Functions" (§2.2-2.4, App. B.2) checked at our
scale, except the gradient-angle claim for activations other than ReLU, which extends the
paper's Table 2 (ours); the thresholds that decide them (a majority of seeds, 10 degrees) are
ours.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from actlab.experiments.teacher_student.summary import PAPER_TABLE2
from actlab.runner.claims import ClaimSpec, all_of, claim_id, gt, judge_all, lt, within

if TYPE_CHECKING:
    from actlab.runner.experiment import Claim

# Ours: "the shifted student ends lower" also asks it to win in more than this share of seeds
# (ablations uses the same rule).
MAJORITY = 0.5
# Ours: how close the measured gradient angle at the first update must be to eq. 61.
ANGLE_TOLERANCE_DEG = 10.0


def claims(summary: dict) -> list[Claim]:
    """The paper's claims per activation, with what we measured."""
    specs: list[ClaimSpec] = []
    for activation, entry in summary.items():
        if not isinstance(entry, dict) or "final_loss_shifted" not in entry:
            continue
        specs += _activation_specs(activation, entry)
    return judge_all(specs)


def _activation_specs(activation: str, entry: dict) -> list[ClaimSpec]:
    n = {
        "act": activation, "majority": MAJORITY,
        "fu": entry["final_loss_unshifted"], "fs": entry["final_loss_shifted"],
        "wins": entry["shifted_wins"],
        "eu": entry["early_loss_unshifted"], "es": entry["early_loss_shifted"],
        "early_step": entry["early_step"], "crossover": entry["crossover_step"],
        "ou": entry["overshoot_unshifted"], "os": entry["overshoot_shifted"],
        "su": entry.get("sharpness_unshifted"), "ss": entry.get("sharpness_shifted"),
    }
    specs = [
        ClaimSpec(
            id=claim_id("teacher-student", activation, "shifted-ends-lower"),
            text="shifted student ends lower ({act}): lower mean final loss, and lower in more "
                 "than {majority:.0%} of the paired seeds",
            measured="final loss {fs:.4g} vs {fu:.4g} unshifted; shifted wins {wins:.0%} of seeds",
            check=all_of(lt(n["fs"], n["fu"]), gt(n["wins"], MAJORITY)),
            source="rethinking", where="§2.2, Fig. 2", numbers=n),
        ClaimSpec(
            id=claim_id("teacher-student", activation, "unshifted-faster-early"),
            text="unshifted student learns faster early ({act}): lower mean loss at step "
                 "{early_step} (5% of training)",
            measured="{eu:.4g} unshifted vs {es:.4g} shifted; median crossover step "
                     "{crossover:.4g}",
            check=lt(n["eu"], n["es"]),
            source="rethinking", where="§2.2, Fig. 2", numbers=n),
        ClaimSpec(
            id=claim_id("teacher-student", activation, "unshifted-overshoots-more"),
            text="unshifted hidden state overshoots more ({act}): larger peak deviation of the "
                 "last block's hidden-state mean from its final value",
            measured="peak deviation from final hidden mean {ou:.4g} vs {os:.4g} shifted",
            check=gt(n["ou"], n["os"]),
            source="rethinking", where="§2.2, Fig. 2", numbers=n),
        ClaimSpec(
            id=claim_id("teacher-student", activation, "shifted-flatter"),
            text="shifted student is flatter (final Hessian lambda_max, {act})",
            measured="{ss:.4g} shifted vs {su:.4g} unshifted",
            check=lt(n["ss"], n["su"]),
            source="rethinking", where="§2.4, Fig. 4", numbers=n),
    ]
    first = entry["gradient_angles"].get("1", {})
    if first.get("measured") is not None and first.get("theory") is not None:
        specs.append(_angle_spec(activation, first["measured"], first["theory"]))
    return specs


def _angle_spec(activation: str, measured: float, theory: float) -> ClaimSpec:
    """Measured angle at k = 1 against eq. 61 at our (m, lr).

    The paper compares the theory with the full model for ReLU only (Table 2, quoted here);
    for the other activations the claim is our extension of it.
    """
    n = {"act": activation, "measured": measured, "theory": theory, "tol": ANGLE_TOLERANCE_DEG}
    text = ("initial gradient angle matches the one-layer theory ({act}): the angle between the "
            "students' gradients at k=1 within {tol:.0f} deg of eq. 61 at our width and "
            "learning rate")
    if activation == "relu":
        n["paper_theory"], n["paper_full"] = PAPER_TABLE2[1]
        text += (" (the paper's Table 2, ReLU at m = 200: {paper_theory:.2f} deg theory, "
                 "{paper_full:.2f} deg full model)")
        source, where = "rethinking", "App. B.2, eq. 61, Table 2"
        quoted: tuple[str, ...] = ("paper_theory", "paper_full")
    else:
        text += " (ours: the paper's Table 2 compares theory and full model for ReLU only)"
        source, where, quoted = "actlab", "", ()
    return ClaimSpec(
        id=claim_id("teacher-student", activation, "initial-angle-matches-theory"),
        text=text,
        measured="angle at k=1: {measured:.1f} deg measured vs {theory:.1f} deg theory",
        check=within(measured, theory, ANGLE_TOLERANCE_DEG),
        source=source, where=where, numbers=n, quoted=quoted)
