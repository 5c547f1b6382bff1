"""Figures of the ``teacher-student`` experiment: Figs. 2, 3, 4, 8, 15 of
"Rethinking Activation Functions"."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from actlab.analysis import COLORS, curves, plot_pair_curves, symlog_steps
from actlab.plotting import pyplot

if TYPE_CHECKING:
    from actlab.experiments.teacher_student import Config
    from actlab.runner.experiment import RunContext


def teacher_student_figures(config: Config, table: Any, data: dict[str, Any],
                            activations: list[str], ctx: RunContext) -> None:
    """Figs. 2, 3, 4, 8, 15 of the paper from the tidy table and the units' data."""
    plt = pyplot()
    n = len(activations)
    last = f"block{config.L - 1}"

    fig, axes = plt.subplots(2, n, figsize=(4 * n, 6.5), squeeze=False, layout="constrained")
    for j, act in enumerate(activations):
        plot_pair_curves(axes[0, j], table, act)
        axes[0, j].set_title(act)
        axes[0, j].set_ylabel("eval loss")
        plot_pair_curves(axes[1, j], table, act, "hidden_mean", last, log=False)
        symlog_steps(axes[1, j])
        axes[1, j].set_ylabel(f"hidden-state mean ({last})")
    axes[0, 0].legend()
    fig.suptitle("Fig. 2: loss (top) and final hidden-state mean (bottom)")
    ctx.save_figure(fig, "fig2_loss_and_hidden_mean")

    for act in activations:
        fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
        cmap = plt.get_cmap("viridis")
        for ax, cond in zip(axes, COLORS):
            for layer in range(config.L):
                curve = curves(table, f"{act}/{cond}", "hidden_mean", f"block{layer}")
                if not curve.empty:
                    ax.plot(curve.index, curve.mean(axis=1), color=cmap(layer / max(1, config.L - 1)))
            symlog_steps(ax)
            ax.set_title(f"{act}, {cond}")
            ax.set_xlabel("step")
        axes[0].set_ylabel("hidden-state mean (colour: block)")
        fig.suptitle("Fig. 15: hidden-state mean of every block (mean over seeds)")
        ctx.save_figure(fig, f"fig15_all_blocks_{act}")

    fig, axes = plt.subplots(1, n, figsize=(4 * n, 3.5), squeeze=False, layout="constrained")
    for j, act in enumerate(activations):
        for cond, color in COLORS.items():
            rows = table[(table.run == f"{act}/{cond}") & (table.metric == "post_act_mean")]
            mean = rows.groupby("step").value.mean()
            axes[0, j].plot(mean.index, mean.to_numpy(), color=color, label=cond)
        axes[0, j].axhline(0, color="k", lw=0.5)
        symlog_steps(axes[0, j])
        axes[0, j].set_title(act)
        axes[0, j].set_xlabel("step")
    axes[0, 0].set_ylabel("post-activation mean (all blocks, seeds)")
    axes[0, 0].legend()
    fig.suptitle("Fig. 8: post-activation means over training")
    ctx.save_figure(fig, "fig8_post_activation_means")

    # Without curvature measurements (curvature_seeds=0) there is no Fig. 4 to draw.
    if table.metric.isin(["lambda_max_hessian", "lambda_max_gn"]).any():
        fig, axes = plt.subplots(1, n, figsize=(4 * n, 3.5), squeeze=False)
        for j, act in enumerate(activations):
            for cond, color in COLORS.items():
                for kind, style in (("lambda_max_hessian", "-"), ("lambda_max_gn", "--")):
                    rows = table[(table.run == f"{act}/{cond}") & (table.metric == kind)]
                    if rows.empty:
                        continue
                    mean = rows.groupby("step").value.mean()
                    label = f"{cond} {'H' if kind.endswith('hessian') else 'GN'}"
                    axes[0, j].plot(np.maximum(mean.index, 1), mean.to_numpy(), style, color=color,
                                    label=label)
            axes[0, j].set_xscale("log")
            axes[0, j].set_yscale("log")
            axes[0, j].set_title(act)
            axes[0, j].set_xlabel("step")
        axes[0, 0].set_ylabel("top eigenvalue")
        axes[0, 0].legend(fontsize=7)
        fig.suptitle("Fig. 4: sharpness over training (Hessian solid, Gauss-Newton dashed)")
        ctx.save_figure(fig, "fig4_sharpness")

    for act in activations:
        planes = data.get(act, {}).get("landscape")
        if not planes:
            continue
        views = [v for v in ("unshifted", "shifted", "shifted_offplane") if v in planes]
        fig, axes = plt.subplots(1, len(views), figsize=(5.5 * len(views), 4.4), squeeze=False,
                                 layout="constrained")
        for ax, view in zip(axes[0], views):
            plane = planes[view]
            z = np.log10(np.maximum(np.asarray(plane["loss"]), 1e-12))
            cs = ax.contourf(plane["alphas"], plane["betas"], z, levels=30, cmap="coolwarm")
            fig.colorbar(cs, ax=ax, label="log10 loss")
            for cond, traj in plane["trajectories"].items():
                t = np.asarray(traj)
                ax.plot(t[:, 0], t[:, 1], ".-", color=COLORS[cond], ms=2, label=cond)
            axes_names = ("n1", "n2") if view == "shifted_offplane" else ("e1", "e2")
            ax.set_xlabel(axes_names[0])
            ax.set_ylabel(axes_names[1])
            ax.set_title(f"{act}: {view.replace('_', ' ')} student loss")
            ax.legend(fontsize=7)
        fig.suptitle("Fig. 3: initial-gradient plane (left, centre) and off-plane plane (right)")
        ctx.save_figure(fig, f"fig3_landscape_{act}")
