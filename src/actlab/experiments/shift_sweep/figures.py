"""Fig. 9 of "Rethinking Activation Functions": final loss against the shift, per activation."""

from __future__ import annotations

from typing import TYPE_CHECKING

from actlab.plotting import pyplot

if TYPE_CHECKING:
    from actlab.experiments.shift_sweep.summary import ShiftCurve
    from actlab.runner.experiment import RunContext


def shift_sweep_figure(sweeps: dict[str, ShiftCurve], ctx: RunContext) -> None:
    """One panel per activation: every seed's final loss over the shifts, their mean, theory."""
    plt = pyplot()
    n = max(1, len(sweeps))
    fig, axes = plt.subplots(1, n, figsize=(4 * n, 3.6), squeeze=False)
    for ax, (activation, sweep) in zip(axes[0], sweeps.items()):
        ax.plot(sweep.frame.columns, sweep.frame.to_numpy().T, color="gray", alpha=0.3, lw=0.7)
        ax.plot(sweep.mean.index, sweep.mean.to_numpy(), color="k", lw=2, label="mean")
        ax.axvline(sweep.theory_shift, color="tab:red", ls="--", label="theory")
        ax.set_yscale("log")
        ax.set_title(activation)
        ax.set_xlabel("shift b")
    axes[0, 0].set_ylabel("final eval loss")
    axes[0, 0].legend()
    fig.suptitle("Fig. 9: final loss vs shift (thin: seeds, thick: mean)")
    ctx.save_figure(fig, "fig9_shift_sweep")
