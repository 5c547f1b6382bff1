"""The claims of ``dit-shift`` ("Rethinking Activation Functions" §4.2, Fig. 7(b), App. E.1),
each judged against the seed spread of its paired residual: beyond the spread a claim holds
or fails, within it it is undecided."""

from __future__ import annotations

from actlab.recipes.dit_protocol import EMPTY_SPREAD, within_spread
from actlab.runner.claims import ClaimSpec, claim_id, judge_all, le, lt
from actlab.runner.experiment import Claim

NAME = "dit-shift"


def claims(summary: dict) -> list[Claim]:
    """Training loss comparable or lower throughout; lower FID at every evaluated checkpoint;
    (ours) a smaller hidden-state overshoot in the last block."""
    loss = {**EMPTY_SPREAD, **summary.get("train_loss", {}), "tol": summary.get("loss_tolerance")}
    fid = {**EMPTY_SPREAD, **summary.get("fid", {})}
    over = {**EMPTY_SPREAD, "shifted": None, "unshifted": None, **summary.get("overshoot", {})}
    specs = [
        ClaimSpec(
            id=claim_id(NAME, "shifted", "train-loss-comparable-or-lower"),
            text="adaptive shifting achieves comparable or lower training loss throughout "
            "training (comparable, ours: at most {tol:.0%} above the unshifted loss)",
            measured="worst checkpoint (step {worst_step}): residual {worst_mean:.3g}; "
            "max over checkpoints of residual − tolerance ± seed sd: {low:.3g} .. "
            "{high:.3g} ({seeds} seeds, {checkpoints} checkpoints)",
            check=le(loss.get("high"), 0.0),
            source="rethinking",
            where="§4.2, Fig. 7(b)",
            numbers=loss,
            undecided_because=within_spread(loss),
        ),
        ClaimSpec(
            id=claim_id(NAME, "shifted", "lower-fid-every-checkpoint"),
            text="the shifted model achieves lower FID at every evaluated checkpoint",
            measured="worst checkpoint (step {worst_step}): FID residual {worst_mean:.3g}; "
            "max over checkpoints of residual ± seed sd: {low:.3g} .. {high:.3g} "
            "({seeds} seeds, {checkpoints} checkpoints)",
            check=lt(fid.get("high"), 0.0),
            source="rethinking",
            where="§4.2; App. E.1, Fig. 19",
            numbers=fid,
            undecided_because=within_spread(fid),
        ),
        ClaimSpec(
            id=claim_id(NAME, "shifted", "smaller-hidden-state-overshoot"),
            text="adaptive shifting gives a smaller hidden-state mean overshoot after the last "
            "block (our extension of §4.1 / Fig. 7(a) to DiT)",
            measured="overshoot {shifted:.3g} shifted vs {unshifted:.3g} unshifted; paired "
            "difference ± seed sd: {low:.3g} .. {high:.3g} ({seeds} seeds)",
            check=lt(over.get("high"), 0.0),
            source="actlab",
            where='hidden-state mean ("Rethinking" §2.2 statistic)',
            numbers=over,
            undecided_because=within_spread(over),
        ),
    ]
    return judge_all(specs)
