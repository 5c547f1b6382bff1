"""The claims of the ``vit-shift`` experiment, read from its summary ("Rethinking Activation
Functions" §4.1, Figs. 6 and 7(a)).

Over seeds every claim is paired (the default): both models of a seed share initial weights
and batch order, so each claim's sample is the per-seed residual (shifted − unshifted). None
is deterministic: all compare trained models."""

from __future__ import annotations

from actlab.runner.claims import ClaimSpec, claim_id, gt, judge_all, lt
from actlab.runner.experiment import Claim

NAME = "vit-shift"


def claims(summary: dict) -> list[Claim]:
    """Fig. 6 (early deficit, final test loss/accuracy, higher train loss) and Fig. 7(a)."""
    early = {"residual": summary.get("acc_residual_early"), "step": summary.get("early_step")}
    accuracy = {"shifted": summary.get("test_acc_shifted"),
                "unshifted": summary.get("test_acc_unshifted")}
    test_loss = {"residual": summary.get("test_loss_residual_final")}
    train_loss = {"residual": summary.get("train_loss_residual_final")}
    overshoot = {"shifted": summary.get("overshoot_shifted"),
                 "unshifted": summary.get("overshoot_unshifted")}
    specs = [
        ClaimSpec(
            id=claim_id(NAME, "shifted", "trails-early"),
            text="adaptive shift initially trails in test accuracy",
            measured="accuracy residual {residual:.3g} at step {step}",
            check=lt(early["residual"], 0.0),
            source="rethinking", where="§4.1, Fig. 6", numbers=early),
        ClaimSpec(
            id=claim_id(NAME, "shifted", "higher-final-accuracy"),
            text="adaptive shift ends with higher test accuracy",
            measured="{shifted:.4f} shifted vs {unshifted:.4f} unshifted",
            check=gt(accuracy["shifted"], accuracy["unshifted"]),
            source="rethinking", where="§4.1, Fig. 6", numbers=accuracy),
        ClaimSpec(
            id=claim_id(NAME, "shifted", "test-loss-residual-final"),
            text="adaptive shift ends with lower test loss",
            measured="test loss residual final {residual:.3g}",
            check=lt(test_loss["residual"], 0.0),
            source="rethinking", where="§4.1, Fig. 6", numbers=test_loss),
        ClaimSpec(
            id=claim_id(NAME, "shifted", "train-loss-residual-final"),
            text="adaptive shift retains a higher training loss at the end",
            measured="train loss residual final {residual:.3g}",
            check=gt(train_loss["residual"], 0.0),
            source="rethinking", where="§4.1, Fig. 6", numbers=train_loss),
        ClaimSpec(
            id=claim_id(NAME, "shifted", "suppresses-overshoot"),
            text="adaptive shift suppresses the hidden-state overshoot (last block)",
            measured="overshoot {shifted:.3g} shifted vs {unshifted:.3g} unshifted",
            check=lt(overshoot["shifted"], overshoot["unshifted"]),
            source="rethinking", where="§4.1, Fig. 7(a)", numbers=overshoot),
    ]
    return judge_all(specs)
