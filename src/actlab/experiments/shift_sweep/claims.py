"""The claims of the ``shift-sweep`` experiment, read from its summary.

"Rethinking Activation Functions" App. A.2 (Fig. 9) states that "the theory-predicted shifts
achieve near-optimal final loss" across ReLU, GELU, Swish, Tanh and sigmoid. Three claims per
activation read it:

- ``theory-shift-near-optimal``: the theory shift's mean final loss within a factor
  :data:`NEAR_OPTIMAL_RATIO` of the grid's best (the factor is ours). A loose bar: ``b = 0``
  can meet it as well (it does in the default-scale reference for ReLU, GELU and SiLU), so
  it does not tell the theory shift from no shift. Its measured text gives b = 0's ratio too.
- ``theory-beats-unshifted``: the mean final loss at the theory shift below that at
  ``b = 0`` (the unshifted model), the comparison that does tell them apart (the paper's
  shifted model ends lower, §2.2, Fig. 2; judging the sweep's theory shift against its b = 0
  is our reading of "near-optimal", fixed before the re-run of the references). The summary
  keeps each seed's two losses (paired) for a per-seed interval.
- Where the theory shift is 0 (tanh: odd, App. A.1 eq. 19) the theory-shifted model *is*
  the unshifted one and ``theory-beats-unshifted`` is vacuous: it is left undecided, and
  ``best-shift-at-theory`` judges instead what the paper's sentence then says, that no
  shift does better than none: the loss-minimising shift of the mean curve (Fig. 9's thick
  curve) within one grid step of 0 (:data:`GRID_STEPS`, ours). Why this and not a loss
  ratio: the ratio of b = 0 to the best is the near-optimal claim itself (the same number),
  so the only thing left to test is where the minimum lies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from actlab.runner.claims import ClaimSpec, claim_id, judge_all, le, lt, slug, within

if TYPE_CHECKING:
    from actlab.runner.experiment import Claim

# Ours: "near-optimal" is the theory shift's mean final loss within this factor of the best shift's.
NEAR_OPTIMAL_RATIO = 1.10
# Ours: where the theory shift is 0, "the best shift is at the theory shift" allows the
# loss-minimising shift of the mean curve this many grid steps away (the grid cannot place
# a minimum more finely; the step is the larger gap from the theory shift to a grid neighbour).
GRID_STEPS = 1
TO_B0 = "theory-beats-unshifted"
AT_THEORY = "best-shift-at-theory"


def claims(summary: dict) -> list[Claim]:
    """Per activation: theory shift near-optimal (loose), theory shift below b = 0, and where
    the theory shift is 0, the best shift at it."""
    specs = []
    for activation, entry in summary.items():
        if not isinstance(entry, dict) or "loss_ratio_theory_vs_best" not in entry:
            continue
        specs.append(_near_optimal(activation, entry))
        specs.append(_beats_unshifted(activation, entry))
        if _theory_is_unshifted(entry):
            specs.append(_best_at_theory(activation, entry))
    return judge_all(specs)


def _theory_is_unshifted(entry: dict) -> bool:
    """Whether the theory shift trains the same model as b = 0 (same grid column)."""
    return round(float(entry["theory_shift"]), 6) == 0.0


def _best_loss(entry: dict) -> float | None:
    losses = [float(v) for v in entry.get("final_loss_by_shift", {}).values() if v == v]
    return min(losses) if losses else None


def _near_optimal(activation: str, entry: dict) -> ClaimSpec:
    best, unshifted = _best_loss(entry), entry.get("final_loss_unshifted")
    n = {"act": activation, "ratio": entry["loss_ratio_theory_vs_best"],
         "bound": NEAR_OPTIMAL_RATIO, "theory": entry["theory_shift"],
         "best_median": entry["best_shift_median"],
         "other": AT_THEORY if _theory_is_unshifted(entry) else TO_B0,
         "ratio_b0": unshifted / best if unshifted is not None and best else None}
    return ClaimSpec(
        id=claim_id("shift-sweep", activation, "theory-shift-near-optimal"),
        text="theory shift is near-optimal ({act}) in the loose sense of App. A.2: its mean "
             "final loss at most {bound:.2f} times that of the best shift of the grid (a bar "
             "that b = 0 can meet too, so it does not tell the theory shift from no shift: "
             "see {other})",
        measured="loss(theory {theory:.3f}) / loss(best) = {ratio:.3f} (b = 0: {ratio_b0:.3f}); "
                 "median per-seed best shift {best_median:.3f}",
        check=le(n["ratio"], NEAR_OPTIMAL_RATIO),
        source="rethinking", where="App. A.2, Fig. 9", numbers=n)


def _beats_unshifted(activation: str, entry: dict) -> ClaimSpec:
    theory_loss, unshifted = entry.get("final_loss_theory"), entry.get("final_loss_unshifted")
    n = {"act": activation, "theory": entry["theory_shift"], "lt": theory_loss,
         "l0": unshifted,
         "ratio": theory_loss / unshifted if theory_loss is not None and unshifted else None}
    if _theory_is_unshifted(entry):
        why = (f"the theory shift of {activation} is 0 (App. A.1, eq. 19: E[phi(Z)] = 0), so the "
               "theory-shifted model is the unshifted one and the comparison is vacuous; judged "
               f"instead by shift-sweep/{slug(activation)}/{AT_THEORY} (the best shift at 0)")
    elif unshifted is None:
        why = "b = 0 was not trained (include_unshifted is off)"
    else:
        why = ""
    return ClaimSpec(
        id=claim_id("shift-sweep", activation, TO_B0),
        text="the theory shift beats no shift ({act}): mean final loss at the theory shift "
             "b = {theory:.3f} below that at b = 0 (the unshifted model), over the same seeds, "
             "initialisations and batches",
        measured="final loss {lt:.4g} at the theory shift vs {l0:.4g} at b = 0 (ratio "
                 "{ratio:.3f})",
        check=lt(theory_loss, unshifted),
        source="rethinking", where="§2.2, Fig. 2; App. A.2, Fig. 9", numbers=n,
        undecided_because=why)


def grid_step_at(shifts: list[float], theory: float) -> float | None:
    """The larger distance from the theory shift to its neighbours on the sorted grid
    ``shifts``; ``None`` when the theory shift is not on the grid or has no neighbour."""
    grid = sorted(shifts)
    at = [i for i, b in enumerate(grid) if abs(b - theory) < 5e-5]  # keys carry 4 decimals
    if not at:
        return None
    i = at[0]
    gaps = [abs(grid[j] - grid[i]) for j in (i - 1, i + 1) if 0 <= j < len(grid)]
    return round(max(gaps), 6) if gaps else None


def _best_at_theory(activation: str, entry: dict[str, Any]) -> ClaimSpec:
    theory = float(entry["theory_shift"])
    shifts = [float(b) for b in entry.get("final_loss_by_shift", {})]
    step = grid_step_at(shifts, theory)
    best = entry.get("best_shift_of_mean_curve")
    n = {"act": activation, "theory": theory, "steps": GRID_STEPS,
         "tol": None if step is None else GRID_STEPS * step,
         "best": None if best is None else round(float(best), 6),
         "best_median": entry.get("best_shift_median"),
         "l0": entry.get("final_loss_unshifted"), "lbest": _best_loss(entry)}
    return ClaimSpec(
        id=claim_id("shift-sweep", activation, AT_THEORY),
        text="no shift does better than the theory shift b = {theory:.3f} ({act}; it is the "
             "unshifted model, App. A.1 eq. 19): the loss-minimising shift of the mean curve "
             "within {steps} grid step ({tol:.3f}) of it (ours: the grid's resolution)",
        measured="best shift of the mean curve {best:.3f}; median per-seed best {best_median:.3f}; "
                 "final loss {l0:.4g} at b = 0 vs {lbest:.4g} at the best",
        check=within(n["best"], theory, n["tol"] if n["tol"] is not None else float("nan")),
        source="rethinking", where="App. A.1, eq. 19; App. A.2, Fig. 9", numbers=n,
        undecided_because="" if step is not None else "the theory shift is not on the grid")
