"""Claims and figures of the ``vit-shift`` experiment (seed 000 §4.1, Figs. 6 and 7(a))."""

from __future__ import annotations

import pandas as pd

from actlab import analysis
from actlab.experiments._common import fmt_or_na
from actlab.runner.claims import claim_id
from actlab.runner.experiment import Claim, RunContext

PREFIX = "vit"


def vit_shift_claims(summary: dict) -> list[Claim]:
    """Fig. 6 (early deficit, final test loss/accuracy, higher train loss) and Fig. 7(a)."""
    src = "seed 000 §4.1, Fig. 6"
    claims: list[Claim] = []
    early = summary.get("acc_residual_early")
    if early is not None:
        claims.append(Claim("adaptive shift initially trails in test accuracy",
                            f"accuracy residual {fmt_or_na(early)} at step "
                            f"{summary.get('early_step')}", early < 0, src,
                            id=claim_id("vit-shift", "shifted", "trails-early"), value=early,
                            comparison="<", threshold=0.0))
    au, as_ = summary.get("test_acc_unshifted"), summary.get("test_acc_shifted")
    if au is not None and as_ is not None:
        claims.append(Claim("adaptive shift ends with higher test accuracy",
                            f"{as_:.4f} shifted vs {au:.4f} unshifted", as_ > au, src,
                            id=claim_id("vit-shift", "shifted", "higher-final-accuracy"),
                            value=as_, comparison=">", threshold=au))
    for key, text, sign in (
            ("test_loss_residual_final", "adaptive shift ends with lower test loss", -1),
            ("train_loss_residual_final",
             "adaptive shift retains a higher training loss at the end", 1)):
        value = summary.get(key)
        if value is not None:
            claims.append(Claim(text, f"{key.replace('_', ' ')} {fmt_or_na(value)}",
                                sign * value > 0, src,
                                id=claim_id("vit-shift", "shifted", key.replace("_", "-")),
                                value=value, comparison="<" if sign < 0 else ">",
                                threshold=0.0))
    ou, os_ = summary.get("overshoot_unshifted"), summary.get("overshoot_shifted")
    if ou is not None and os_ is not None:
        claims.append(Claim("adaptive shift suppresses the hidden-state overshoot "
                            "(last block)", f"overshoot {fmt_or_na(os_)} shifted vs "
                            f"{fmt_or_na(ou)} unshifted", os_ < ou, "seed 000 §4.1, Fig. 7(a)",
                            id=claim_id("vit-shift", "shifted", "suppresses-overshoot"),
                            value=os_, comparison="<", threshold=ou))
    return claims


def vit_shift_figures(table: pd.DataFrame, depth: int, ctx: RunContext) -> None:
    """Fig. 6 residuals, Fig. 7(a) hidden-state means per block, and the raw curves."""
    plt = analysis.pyplot()
    if table.empty:
        return
    fig, axes = plt.subplots(1, 3, figsize=(15, 3.8))
    for ax, (metric, label) in zip(axes, (("train_loss", "training-loss residual"),
                                          ("test_loss", "test-loss residual"),
                                          ("test_accuracy", "test-accuracy residual"))):
        residual = analysis.paired_residual(table, metric, PREFIX)
        if residual.empty:
            continue
        analysis.plot_residual(ax, residual)
        ax.set_title(f"{label} (shifted - unshifted)", fontsize=9)
    ctx.save_figure(fig, "fig6_residuals")

    fig, axes = plt.subplots(2, depth, figsize=(3.4 * depth, 6.4), squeeze=False)
    for block in range(depth):
        analysis.plot_pair_curves(axes[0, block], table, PREFIX, "hidden_mean", f"block{block}")
        axes[0, block].set_title(f"hidden-state mean after block {block}", fontsize=9)
        analysis.plot_pair_curves(axes[1, block], table, PREFIX, "act_mean", f"act{block}")
        axes[1, block].set_title(f"MLP post-activation mean, block {block}", fontsize=9)
    axes[0, 0].legend(fontsize=7)
    ctx.save_figure(fig, "fig7a_hidden_mean")

    fig, axes = plt.subplots(1, 3, figsize=(15, 3.8))
    for ax, metric in zip(axes, ("train_loss", "test_loss", "test_accuracy")):
        analysis.plot_pair_curves(ax, table, PREFIX, metric)
        ax.set_ylabel(metric.replace("_", " "))
        if "loss" in metric:
            ax.set_yscale("log")
    axes[0].legend(fontsize=7)
    ctx.save_figure(fig, "vit_curves")
