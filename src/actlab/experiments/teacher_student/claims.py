"""The claims of the ``teacher-student`` experiment, read from its summary.

Each is a statement of "Rethinking Activation Functions" (§2.2-2.4, App. B.1.3, App. B.2)
checked at our scale, except the gradient-angle claims for activations other than ReLU, which
extend the paper's Table 2, and the check of the later angles against eq. 61 at the learning
rate we fitted to Table 2 (both ours); the thresholds that decide them (10 degrees, 60
degrees, 10 %, a factor of 2 for "around step 100") are ours.

Fig. 2's loss reversal is two claims on paired seeds: the unshifted student lower at step 100
(the only step §2.2 names for the early period) and the shifted one lower at the end. Both
were fixed before the runs at the paper's large size, (50, 200, 20), were made.

The Table 2 size checks (``table2-angle-k{k}``: each measured angle within 10 degrees of the
table's) do not see the direction: an angle that rises with k can meet them at k = 5 and 20
while the table's fall. ``angle-falls-over-k`` (per activation) judges the direction: the
angle at k = 100 more than 10 degrees below the one at k = 1, and no rise of more than 10
degrees from one k of the table to the next (:data:`ANGLE_TREND_KS`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from actlab.experiments.teacher_student.summary import PAPER_TABLE2
from actlab.recipes.teacher_student import PAPER_EARLY_STEP
from actlab.runner.claims import (
    ClaimSpec,
    all_of,
    claim_id,
    gt,
    judge_all,
    le,
    lt,
    within,
    within_factor,
)

if TYPE_CHECKING:
    from actlab.runner.experiment import Claim

# Ours, ablations' rule: "the shifted model ends lower" also asks it to win in more than this
# share of seeds. teacher-student judges the same statement on the paired interval alone.
MAJORITY = 0.5
# Fig. 2's two loss statements (§2.2), fixed before the (50, 200, 20) sweep was run:
# "learns faster initially" is judged at the step the paper names for that period (the
# overshoot "around step 100, coinciding with its period of faster loss reduction",
# PAPER_EARLY_STEP) and "converges to a lower loss" at the last logged step, each on the
# per-seed differences of paired students (95 % interval below 0). The logged step nearest
# PAPER_EARLY_STEP counts when it is within EARLY_STEP_SLACK of it (ours: older runs logged a
# geometric grid that holds 108 but not 100); otherwise the early claim is undecided.
EARLY_STEP_SLACK = 10
# Ours: "around step 100" for the step of the overshoot's peak read as within a factor of 2
# (50 to 200 steps), the unshifted student's last block; judged on the per-seed peak steps.
AROUND_FACTOR = 2.0
# Ours, fixed with the claims of Figs. 3, 8 and 15 before the (50, 200, 20) runs:
# "near zero" (App. A, Fig. 8) read as below a quarter of the bias b the shift removes, at
# every block and logged step; "largely outside" the plane (§2.3) as more than half of the
# squared displacement; "most of the blocks" (App. C.4) as more than half of them.
NEAR_ZERO_OF_BIAS = 0.25
LARGELY = 0.5
MOST = 0.5
# Ours: how close a measured gradient angle must be to the angle it is compared with, eq. 61's
# or the full-model angle of the paper's Table 2. One bar for every angle comparison of this
# experiment: the k = 1 claim has used it from the start, and the Table 2 comparison takes it
# over unchanged (fixed before the kept --full run was judged against Table 2). Table 2 states
# no learning rate, batch or length, so ours (Adam 1e-3, batch 256) may differ from the paper's.
ANGLE_TOLERANCE_DEG = 10.0
# Ours: "nearly orthogonal" (§2.3 on Fig. 3; App. B.2 after Table 2) read as an angle above 60
# degrees, a cosine below 1/2, halfway between parallel (1) and orthogonal (0); the paper
# calls its 76.25 and 77.45 degrees nearly orthogonal.
NEARLY_ORTHOGONAL_DEG = 60.0
# Ours: "remain close" (App. B.1.3, Fig. 11) read as the top Hessian and Gauss-Newton
# eigenvalues of the shifted student within 10 % of each other at the last logged step.
HESSIAN_GN_REL_TOL = 0.10
TABLE2 = "App. B.2, Table 2"
# The direction of the angle over k, as the full-model column of the paper's Table 2 shows it
# (ReLU, m = 200): 76.25, 75.01, 69.22, 46.58 deg at k = 1, 5, 20, 100, falling at every step
# (its theory column, 77.45 to 77.22, barely moves). Ours, the exact test, at the table's k:
# (a) the measured angle at the last k more than ANGLE_TOLERANCE_DEG below the one at the
# first k, and (b) no rise of more than ANGLE_TOLERANCE_DEG from one k of the table to the
# next. Why (a) on the ends: the table's fall is carried by them (29.67 deg from k = 1 to
# 100); its first steps (1.24 deg from k = 1 to 5, 5.79 deg from 5 to 20) are inside the
# 10 deg within which this experiment calls two angles the same, so demanding a fall at every
# step would be decided by seed noise. Why (b): the table falls at every step, so a clear
# rise between neighbouring k contradicts it even where the ends happen to fall (a zigzag).
# Why the margin: a change within the tolerance is one the angle claims above could not tell
# from no change; the table's fall is three times it. Part (a) and the margin were fixed
# before the re-run of the references; part (b) was added after its author had seen the
# committed default-scale reference's ReLU angles zigzag (the ends fall 14.2 deg, k = 5 to 20
# rises 14.1 deg), so the claim is marked post hoc (ANGLE_TREND_POST_HOC).
ANGLE_TREND_KS = tuple(PAPER_TABLE2)  # (1, 5, 20, 100)
ANGLE_TREND_POST_HOC = (
    "part (b), no rise of more than 10 deg between neighbouring k, was added after the "
    "default-scale reference's ReLU angles were seen to zigzag (ends fall 14.2 deg, k = 5 to 20 "
    "rises 14.1 deg); part (a), the fall of more than 10 deg from k = 1 to 100, was fixed before"
)


def claims(summary: dict) -> list[Claim]:
    """The paper's claims per activation, with what we measured."""
    specs: list[ClaimSpec] = []
    for activation, entry in summary.items():
        if not isinstance(entry, dict) or "final_loss_shifted" not in entry:
            continue
        specs += _activation_specs(activation, entry)
        if activation == "relu":
            specs += _relu_specs(entry, summary)
    return judge_all(specs)


def _activation_specs(activation: str, entry: dict) -> list[ClaimSpec]:
    n = {
        "act": activation, "majority": MAJORITY,
        "fu": entry["final_loss_unshifted"], "fs": entry["final_loss_shifted"],
        "wins": entry["shifted_wins"],
        "eu": entry["early_loss_unshifted"], "es": entry["early_loss_shifted"],
        "early_step": entry["early_step"], "crossover": entry["crossover_step"],
        "ou": entry["overshoot_unshifted"], "os": entry["overshoot_shifted"],
        "peak_u": entry.get("overshoot_step_unshifted"), "paper_early": PAPER_EARLY_STEP,
        "factor": AROUND_FACTOR,
        "su": entry.get("sharpness_unshifted"), "ss": entry.get("sharpness_shifted"),
    }
    early_off = abs(n["early_step"] - PAPER_EARLY_STEP) > EARLY_STEP_SLACK
    specs = [
        ClaimSpec(
            id=claim_id("teacher-student", activation, "shifted-ends-lower"),
            text="shifted student converges to a lower loss ({act}): lower final loss, on the "
                 "per-seed differences of the paired students",
            measured="final loss {fs:.4g} vs {fu:.4g} unshifted; shifted lower in {wins:.0%} "
                     "of seeds",
            check=lt(n["fs"], n["fu"]),
            source="rethinking", where="§2.2, Fig. 2", numbers=n),
        ClaimSpec(
            id=claim_id("teacher-student", activation, "unshifted-faster-early"),
            text="unshifted student learns faster initially ({act}): lower loss at step "
                 "{early_step}, the logged step nearest the paper's early period (its "
                 "overshoot \"around step {paper_early}\" coincides with the faster loss "
                 "reduction), on the per-seed differences of the paired students",
            measured="{eu:.4g} unshifted vs {es:.4g} shifted; median crossover step "
                     "{crossover:.4g}",
            check=lt(n["eu"], n["es"]),
            source="rethinking", where="§2.2, Fig. 2", numbers=n, quoted=("paper_early",),
            undecided_because=(
                f"this run's early loss is at step {n['early_step']}, not near the paper's "
                f"step {PAPER_EARLY_STEP} (a run shorter than it, or a summary made before "
                "the early step was fixed)") if early_off else ""),
        ClaimSpec(
            id=claim_id("teacher-student", activation, "unshifted-overshoots-more"),
            text="unshifted hidden state overshoots more ({act}): the last block's hidden-state "
                 "mean goes further past its final value (on the far side from its start)",
            measured="overshoot past the final hidden mean {ou:.4g} vs {os:.4g} shifted",
            check=gt(n["ou"], n["os"]),
            source="rethinking", where="§2.2, Fig. 2", numbers=n),
        _flatter_spec(activation, entry),
        ClaimSpec(
            id=claim_id("teacher-student", activation, "overshoot-peaks-around-step-100"),
            text="the unshifted hidden state overshoots around step {paper_early} ({act}): the "
                 "peak of the last block's overshoot within a factor of {factor:g} of step "
                 "{paper_early} (the factor is ours)",
            measured="peak at step {peak_u:.4g} (mean over the seeds that overshoot)",
            check=within_factor(n["peak_u"], PAPER_EARLY_STEP, AROUND_FACTOR),
            source="rethinking", where="§2.2, Fig. 2", numbers=n, quoted=("paper_early",)),
    ]
    specs += _trajectory_specs(activation, entry)
    first = entry["gradient_angles"].get("1", {})
    if first.get("measured") is not None and first.get("theory") is not None:
        specs.append(_angle_spec(activation, first["measured"], first["theory"]))
    if entry["gradient_angles"]:
        specs.append(_angle_trend_spec(activation, entry["gradient_angles"]))
    return specs


def _trajectory_specs(activation: str, entry: dict) -> list[ClaimSpec]:
    """Figs. 3, 8 and 15 as claims (see :mod:`.paths` for the numbers). Fig. 15 and the
    paper's Fig. 3 show ReLU; for the other activations these are our extension."""
    paper = activation == "relu"
    n = {"act": activation, "b": entry.get("theory_shift"), "near": NEAR_ZERO_OF_BIAS,
         "post_s": entry.get("post_act_abs_max_shifted"),
         "post_u": entry.get("post_act_abs_max_unshifted"),
         "share": entry.get("overshoot_block_share"), "most": MOST,
         "ou": entry.get("overshoot_mean_blocks_unshifted"),
         "os": entry.get("overshoot_mean_blocks_shifted"),
         "turn_u": entry.get("turn_unshifted"), "turn_s": entry.get("turn_shifted"),
         "off_s": entry.get("offplane_share_shifted"),
         "off_u": entry.get("offplane_share_unshifted"), "largely": LARGELY,
         "early": entry.get("plane_early_step")}
    bound = None if n["b"] is None else NEAR_ZERO_OF_BIAS * n["b"]
    ours = "" if paper else " (ours: the paper shows ReLU)"
    no_blocks = "" if n["share"] is not None else "no per-block overshoot in this summary"
    no_plane = "" if n["turn_u"] is not None else "no plane trajectory in this summary"
    return [
        ClaimSpec(
            id=claim_id("teacher-student", activation, "shifted-post-activation-means-near-zero"),
            text="the shifted student's post-activation means stay near zero throughout "
                 "training ({act}): at every block and logged step below {near:g} of the bias "
                 "b = {b:.3g} that the shift removes (the fraction is ours)",
            measured="largest |post-activation mean| {post_s:.3g} shifted ({post_u:.3g} "
                     "unshifted)",
            check=lt(n["post_s"], bound), source="rethinking", where="App. A, Fig. 8",
            numbers=n, undecided_because="" if n["post_s"] is not None else
            "no post-activation means in this summary"),
        ClaimSpec(
            id=claim_id("teacher-student", activation, "shifting-reduces-overshoot-across-blocks"),
            text="shifting reduces the hidden-state overshoot across the blocks ({act}): the "
                 "unshifted student overshoots more in more than {most:.0%} of the blocks, and "
                 "more on average over blocks" + ours,
            measured="unshifted overshoots more in {share:.0%} of blocks; mean overshoot "
                     "{ou:.3g} unshifted vs {os:.3g} shifted",
            check=all_of(gt(n["share"], MOST), gt(n["ou"], n["os"])),
            source="rethinking" if paper else "actlab",
            where="App. C.4, Fig. 15" if paper else "", numbers=n,
            undecided_because=no_blocks),
        ClaimSpec(
            id=claim_id("teacher-student", activation, "unshifted-turns-more-on-plane"),
            text="the unshifted trajectory turns on the initial-gradient plane, the shifted "
                 "one less ({act}): the angle between the displacement up to step {early} and "
                 "the one after it, larger unshifted" + ours,
            measured="turn {turn_u:.1f} deg unshifted vs {turn_s:.1f} deg shifted",
            check=gt(n["turn_u"], n["turn_s"]),
            source="rethinking" if paper else "actlab", where="§2.3, Fig. 3" if paper else "",
            numbers=n, undecided_because=no_plane),
        ClaimSpec(
            id=claim_id("teacher-student", activation, "shifted-early-update-off-plane"),
            text="the shifted student's early update develops largely outside the "
                 "initial-gradient plane ({act}): more than {largely:.0%} of its squared "
                 "displacement at step {early} off the plane (eq. 5; the fraction is ours)" + ours,
            measured="{off_s:.1%} off the plane shifted ({off_u:.1%} unshifted)",
            check=gt(n["off_s"], LARGELY),
            source="rethinking" if paper else "actlab", where="§2.3, Fig. 3" if paper else "",
            numbers=n, undecided_because=no_plane),
    ]


def _flatter_spec(activation: str, entry: dict) -> ClaimSpec:
    """Fig. 4: the shifted student's leading Hessian eigenvalues below the unshifted one's
    "throughout training": lambda_1 and lambda_k (the k-th largest recorded) at every
    curvature point, judged as one family (intersection-union over the points).

    A summary made before the curvature paths were kept has only the last point's lambda_1;
    the claim is then undecided rather than judged at one step.
    """
    steps = entry.get("sharpness_steps") or []
    k = entry.get("sharpness_k", 1)
    pairs = [(entry[f"sharpness{part}_shifted_path"][i], entry[f"sharpness{part}_unshifted_path"][i])
             for part in (("", "_last") if k > 1 else ("",)) for i in range(len(steps))]
    ratios = [s / u for s, u in pairs if s is not None and u]
    n = {"act": activation, "k": k, "points": len(steps), "ss": entry.get("sharpness_shifted"),
         "su": entry.get("sharpness_unshifted"),
         "worst": max(ratios) if ratios else None, "first": steps[0] if steps else None,
         "last": steps[-1] if steps else None}
    which = "lambda_1 and lambda_{k}" if k > 1 else "lambda_1"
    return ClaimSpec(
        id=claim_id("teacher-student", activation, "shifted-flatter"),
        text="shifted student is flatter throughout training ({act}): its leading Hessian "
             f"eigenvalues ({which}) below the unshifted student's at each of the {{points}} "
             "curvature points from step {first} to {last}, judged together",
        measured="largest shifted/unshifted ratio over the points {worst:.3g}; at the last "
                 "point lambda_1 {ss:.4g} shifted vs {su:.4g} unshifted",
        check=all_of(*(lt(s, u) for s, u in pairs)) if pairs else lt(None, 0.0),
        source="rethinking", where="§2.4, Fig. 4", numbers=n,
        undecided_because="" if pairs else
        "no curvature path in this summary (made before it was kept, or no curvature seeds)")


def _angle_trend_spec(activation: str, angles: dict) -> ClaimSpec:
    """The measured angle falls from k = 1 to k = 100 by more than the angle tolerance and
    rises by no more than it between neighbouring k, as Table 2's full-model column falls
    (see :data:`ANGLE_TREND_KS`).

    The paper measures the full-model angles for ReLU only; for the other activations the
    claim is our extension of Table 2's direction.
    """
    ks = ANGLE_TREND_KS
    first, last = ks[0], ks[-1]

    def measured(k: int) -> float | None:
        return angles.get(str(k), {}).get("measured")

    def change(a: int, b: int) -> float | None:  # angle at b minus angle at a
        return None if measured(a) is None or measured(b) is None else measured(b) - measured(a)

    n = {"act": activation, "first": first, "last": last, "tol": ANGLE_TOLERANCE_DEG,
         **{f"m{k}": measured(k) for k in ks}}
    fall = change(last, first)
    rises = [change(a, b) for a, b in zip(ks, ks[1:], strict=False)]
    n["fall"] = fall
    n["max_rise"] = max((r for r in rises if r is not None), default=None)
    text = ("the gradient angle falls over training ({act}): the measured angle at k = {last} "
            "more than {tol:.0f} deg below the one at k = {first}, with no rise of more than "
            "{tol:.0f} deg between neighbouring k of 1, 5, 20, 100")
    if activation == "relu":
        n["paper_first"], n["paper_last"] = PAPER_TABLE2[first][1], PAPER_TABLE2[last][1]
        text += (", as the full-model column of the paper's Table 2 falls from {paper_first:.2f} "
                 "to {paper_last:.2f} deg (ReLU; the paper states no width for it, m = 200 is "
                 "our inference from eq. 61; a direction, judged at every width; "
                 "the margin is ours)")
        source, where, quoted = "rethinking", TABLE2, ("paper_first", "paper_last")
    else:
        text += " (ours: extends the fall of the paper's Table 2, which measures ReLU only)"
        source, where, quoted = "actlab", "", ()
    missing = [k for k in ANGLE_TREND_KS if n[f"m{k}"] is None]
    return ClaimSpec(
        id=claim_id("teacher-student", activation, "angle-falls-over-k"),
        text=text,
        measured="fall {fall:.1f} deg, largest rise between neighbouring k {max_rise:.1f} deg: "
                 "{m1:.1f}, {m5:.1f}, {m20:.1f}, {m100:.1f} deg at k = 1, 5, 20, 100 (mean "
                 "over seeds)",
        check=all_of(gt(fall, ANGLE_TOLERANCE_DEG),
                     *(le(rise, ANGLE_TOLERANCE_DEG) for rise in rises)),
        source=source, where=where, numbers=n, quoted=quoted,
        undecided_because=f"no measured angle at k = {missing}" if missing else "",
        post_hoc=ANGLE_TREND_POST_HOC)


def _angle_spec(activation: str, measured: float, theory: float) -> ClaimSpec:
    """Measured angle at k = 1 against eq. 61 at our width (at k = 1 it has no learning rate).

    The paper compares the theory with the full model for ReLU only (Table 2: "The
    theoretical and measured angles are close early in training"); for the other activations
    the claim is our extension of it. The theory angle is our prediction at our width, not a
    number of the paper's.
    """
    n = {"act": activation, "measured": measured, "theory": theory, "tol": ANGLE_TOLERANCE_DEG}
    text = ("initial gradient angle matches the one-layer theory ({act}): the angle between the "
            "students' gradients at k=1 within {tol:.0f} deg of eq. 61 at our width (at k = 1 "
            "it does not depend on the learning rate)")
    if activation == "relu":
        n["paper_theory"], n["paper_full"] = PAPER_TABLE2[1]
        text += (" (the paper's Table 2, ReLU, at a width it does not state (m = 200 by our "
                 "inference from eq. 61): {paper_theory:.2f} deg theory, "
                 "{paper_full:.2f} deg full model, close early in training)")
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
        source=source, where=where, numbers=n, quoted=quoted, predicted=("theory",))


def _relu_specs(entry: dict, summary: dict) -> list[ClaimSpec]:
    """ReLU against Table 2 (the paper's model only), our fitted-eta check, Figs. 3 and 11."""
    angles = entry["gradient_angles"]

    def measured(k: int) -> float | None:
        return angles.get(str(k), {}).get("measured")

    # Table 2 is ReLU at a width the paper does not state; we infer m = 200 from eq. 61 and the
    # theory column (summary.PAPER_TABLE2). The summary carries it only at that width.
    off_width = ("" if "paper_table2_relu_m200" in summary else
                 "Table 2 is ReLU at m = 200 (our inference from eq. 61 and the theory "
                 "column; the paper states no width for it) and this run "
                 "has another width: judged at --full")
    specs = []
    for k, (_, paper_full) in PAPER_TABLE2.items():
        n = {"k": k, "measured": measured(k), "paper_full": paper_full,
             "tol": ANGLE_TOLERANCE_DEG}
        specs.append(ClaimSpec(
            id=claim_id("teacher-student", "relu", f"table2-angle-k{k}"),
            text="full-model gradient angle at k = {k} within {tol:.0f} deg of the paper's "
                 "Table 2 ({paper_full:.2f} deg, ReLU, m = 200 by our inference from eq. 61; the "
                 "paper states no width, learning "
                 "rate or batch for it)",
            measured="{measured:.1f} deg (mean over seeds)",
            check=within(n["measured"], paper_full, ANGLE_TOLERANCE_DEG),
            source="rethinking", where=TABLE2, numbers=n, quoted=("paper_full",),
            undecided_because=off_width))
    later = (5, 20, 100)
    n = {"eta": summary.get("angle_theory_eta"), "tol": ANGLE_TOLERANCE_DEG,
         **{f"m{k}": measured(k) for k in later},
         **{f"t{k}": angles.get(str(k), {}).get("theory") for k in later}}
    unmeasured = [k for k in later if n[f"m{k}"] is None or n[f"t{k}"] is None]
    specs.append(ClaimSpec(
        id=claim_id("teacher-student", "relu", "later-angles-track-fitted-theory"),
        text="ours, a consistency check: the measured angles at k = 5, 20, 100 within {tol:.0f} "
             "deg of eq. 61 at eta = {eta:.2g} (the learning rate we fitted to Table 2's theory "
             "column; the paper states none)",
        measured="k = 5, 20, 100: {m5:.1f}, {m20:.1f}, {m100:.1f} deg measured vs {t5:.2f}, "
                 "{t20:.2f}, {t100:.2f} deg theory",
        check=all_of(*(within(n[f"m{k}"], n[f"t{k}"] or 0.0, ANGLE_TOLERANCE_DEG)
                       for k in later)),
        source="actlab", numbers=n,
        predicted=() if unmeasured else tuple(f"t{k}" for k in later),
        undecided_because=f"no angle at k = {unmeasured}" if unmeasured else ""))
    n = {"measured": measured(1), "bar": NEARLY_ORTHOGONAL_DEG, "paper_full": PAPER_TABLE2[1][1]}
    specs.append(ClaimSpec(
        id=claim_id("teacher-student", "relu", "initial-gradients-nearly-orthogonal"),
        text="the students' initial gradients are nearly orthogonal (relu): angle at k = 1 "
             "above {bar:.0f} deg (ours: a cosine below 1/2; the paper calls its "
             "{paper_full:.2f} deg nearly orthogonal)",
        measured="{measured:.1f} deg",
        check=gt(n["measured"], NEARLY_ORTHOGONAL_DEG),
        source="rethinking", where="§2.3, Fig. 3; App. B.2, Table 2", numbers=n,
        quoted=("paper_full",)))
    hessian, gn = entry.get("sharpness_shifted"), entry.get("sharpness_gn_shifted")
    n = {"hessian": hessian, "gn": gn, "rel_tol": HESSIAN_GN_REL_TOL,
         "gap": abs(hessian - gn) / hessian if hessian and gn is not None else None}
    specs.append(ClaimSpec(
        id=claim_id("teacher-student", "relu", "shifted-hessian-matches-gauss-newton"),
        text="ours, extending App. B.1.3's Fig. 11 (the one-block model at b = mu-bar, which "
             "gn-bounds checks) to the deep student: the top eigenvalues of the Hessian and its "
             "Gauss-Newton approximation stay close (relu, shifted student at b = 0.230, last "
             "logged step; within {rel_tol:.0%})",
        measured="lambda_max H {hessian:.4g} vs GN {gn:.4g} (relative gap {gap:.2%})",
        check=le(n["gap"], HESSIAN_GN_REL_TOL),
        source="actlab", where="", numbers=n))
    return specs
