"""The ``dead-units`` figure: dead share per epoch of the shallow runs, per layer of the deep stack."""

from __future__ import annotations

from typing import TYPE_CHECKING

from actlab.experiments.dead_units.summary import shallow_runs
from actlab.plotting import pyplot
from actlab.runner.experiment import RunContext

if TYPE_CHECKING:
    from actlab.experiments.dead_units import DeadUnitsConfig


def dead_units_figure(table, config: DeadUnitsConfig, ctx: RunContext) -> None:
    """Mean dead share over seeds per epoch (shallow runs) and per layer (fresh deep stack,
    whole training set against one batch)."""
    plt = pyplot()

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.2))
    for i, run in enumerate(shallow_runs(config)):
        rows = table[(table["run"] == run) & (table["metric"] == "dead_share")]
        curve = rows.groupby("step")["value"].mean()
        left.plot(curve.index, 100 * curve.values, color=f"C{i}", label=run)
    left.set_xlabel("epoch")
    left.set_ylabel("dead units (%)")
    left.set_title("one hidden layer of 128 units (mean over seeds)")
    left.legend()
    deep = table[(table["run"] == "deep") & (table["layer"] != "")]
    for metric, style in (("dead_share", "-"), ("dead_share_one_batch", "--")):
        rows = deep[deep["metric"] == metric]
        curve = rows.assign(l=rows["layer"].astype(int)).groupby("l")["value"].mean()
        right.plot(curve.index, 100 * curve.values, ls=style,
                   label="whole training set" if metric == "dead_share" else "one batch of 20")
    right.set_xlabel("layer")
    right.set_title(f"fresh {config.deep_depth}x{config.deep_width} He ReLU stack")
    right.legend()
    ctx.save_figure(fig, "dead_units")
