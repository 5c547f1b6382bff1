"""The claims of the ``vit-shift`` experiment, read from its summary (seed 000 §4.1)."""

from __future__ import annotations

from actlab.runner.claims import claim_id, fmt_or_na
from actlab.runner.experiment import Claim


def claims(summary: dict) -> list[Claim]:
    """Fig. 6 (early deficit, final test loss/accuracy, higher train loss) and Fig. 7(a)."""
    src = "seed 000 §4.1, Fig. 6"
    result: list[Claim] = []
    early = summary.get("acc_residual_early")
    if early is not None:
        result.append(Claim("adaptive shift initially trails in test accuracy",
                            f"accuracy residual {fmt_or_na(early)} at step "
                            f"{summary.get('early_step')}", early < 0, src,
                            id=claim_id("vit-shift", "shifted", "trails-early"), value=early,
                            comparison="<", threshold=0.0))
    au, as_ = summary.get("test_acc_unshifted"), summary.get("test_acc_shifted")
    if au is not None and as_ is not None:
        result.append(Claim("adaptive shift ends with higher test accuracy",
                            f"{as_:.4f} shifted vs {au:.4f} unshifted", as_ > au, src,
                            id=claim_id("vit-shift", "shifted", "higher-final-accuracy"),
                            value=as_, comparison=">", threshold=au))
    for key, text, sign in (
            ("test_loss_residual_final", "adaptive shift ends with lower test loss", -1),
            ("train_loss_residual_final",
             "adaptive shift retains a higher training loss at the end", 1)):
        value = summary.get(key)
        if value is not None:
            result.append(Claim(text, f"{key.replace('_', ' ')} {fmt_or_na(value)}",
                                sign * value > 0, src,
                                id=claim_id("vit-shift", "shifted", key.replace("_", "-")),
                                value=value, comparison="<" if sign < 0 else ">",
                                threshold=0.0))
    ou, os_ = summary.get("overshoot_unshifted"), summary.get("overshoot_shifted")
    if ou is not None and os_ is not None:
        result.append(Claim("adaptive shift suppresses the hidden-state overshoot "
                            "(last block)", f"overshoot {fmt_or_na(os_)} shifted vs "
                            f"{fmt_or_na(ou)} unshifted", os_ < ou, "seed 000 §4.1, Fig. 7(a)",
                            id=claim_id("vit-shift", "shifted", "suppresses-overshoot"),
                            value=os_, comparison="<", threshold=ou))
    return result
