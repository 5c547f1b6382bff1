"""The claims of the ``size-sweep`` experiment, read from its summary.

All are statements of "Rethinking Activation Functions" App. C.1-C.2 (Figs. 12-13); how they
are decided (the mean and a majority of grid cells, the deepest against the shallowest depth,
the widest against the narrowest width, the first against the last size) is ours. The bars
of the two trend claims were fixed before the grid was run at the paper's depths (L = 10, 20).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from actlab.runner.claims import ClaimSpec, all_of, claim_id, gt, judge_all, le

if TYPE_CHECKING:
    from actlab.runner.experiment import Claim

# Ours: shifting must help in more than this share of the grid's cells.
MAJORITY = 0.5


def _trend(grid: dict, axis: int) -> dict | None:
    """The mean improvement at the largest value of ``axis`` (0: d, 1: m, 2: L) minus the mean
    at the smallest, over the cells that have both ends with the other two sizes equal; None
    when the grid has a single value on that axis or no such pair of cells."""
    sizes = {key: tuple(int(part) for part in key.split("x")) for key in grid}
    values = sorted({size[axis] for size in sizes.values()})
    if len(values) < 2:
        return None
    low, high = values[0], values[-1]
    by_size = {size: grid[key]["relative_improvement"] for key, size in sizes.items()}
    gaps = []
    for size, improvement in by_size.items():
        if size[axis] != low:
            continue
        partner = size[:axis] + (high,) + size[axis + 1:]
        if partner in by_size:
            gaps.append(by_size[partner] - improvement)
    if not gaps:
        return None
    return {"gain": sum(gaps) / len(gaps), "low": low, "high": high, "pairs": len(gaps)}


def claims(summary: dict) -> list[Claim]:
    """Shifting helps on average across sizes; optimal shifts concentrate near theory."""
    specs = []
    mean = summary.get("mean_relative_improvement")
    grid = summary.get("grid", {})
    if mean is not None:
        helped = sum(1 for c in grid.values() if c["relative_improvement"] > 0)
        n = {"mean": mean, "helped": helped, "cells": len(grid), "majority": MAJORITY}
        specs.append(ClaimSpec(
            id=claim_id("size-sweep", "all", "shift-lowers-final-loss"),
            text="shifting lowers the final loss across (d, m, L): positive mean relative "
                 "improvement, and better in more than {majority:.0%} of the grid's cells (Fig. 12 "
                 "maps the improvement per cell; its trend with depth and width is judged by the "
                 "gain-grows claims)",
            measured="mean relative improvement {mean:.1%}; better in {helped}/{cells} cells",
            check=all_of(gt(mean, 0.0), gt(helped, MAJORITY * len(grid))),
            source="rethinking", where="App. C.1, Fig. 12", numbers=n))
    # App. C.1: "The improvement from reducing activation bias is generally larger at greater
    # depth and width." Judged per axis: the improvement at the largest depth (width) minus
    # the one at the smallest, cell by cell with the other sizes equal, averaged; over seeds
    # it must be above zero on its interval.
    for axis, name, symbol in ((2, "depth", "L"), (1, "width", "m")):
        trend = _trend(grid, axis)
        if trend is None:
            continue
        specs.append(ClaimSpec(
            id=claim_id("size-sweep", "all", f"gain-grows-with-{name}"),
            text=f"shifting's relative improvement is larger at greater {name}: the mean "
                 f"improvement at {symbol} = {{high}} above the one at {symbol} = {{low}}, cell "
                 "by cell with the other sizes equal",
            measured=f"improvement at {symbol} = {{high}} minus at {symbol} = {{low}}: "
                     "{gain:+.1%} (mean over {pairs} cell pairs)",
            check=gt(trend["gain"], 0.0),
            source="rethinking", where="App. C.1, Fig. 12", numbers=trend))
    optimal = summary.get("optimal_shift", {})
    if len(optimal) >= 2:
        # smallest to largest model by (d, m, L): the summary's keys come back from JSON in
        # text order, where "20x80x10" sorts before "5x20x2"
        sizes = sorted(optimal, key=lambda size: [int(part) for part in size.split("x")])
        n = {"first": optimal[sizes[0]]["mean_abs_distance_to_theory"],
             "last": optimal[sizes[-1]]["mean_abs_distance_to_theory"],
             "small": sizes[0], "large": sizes[-1]}
        specs.append(ClaimSpec(
            id=claim_id("size-sweep", "all", "optimal-shifts-concentrate-near-theory"),
            text="optimal shifts concentrate near theory as the model grows: the seeds' mean "
                 "|b* - b_theory| of the largest size at most that of the smallest",
            measured="mean |b* - b_theory|: {first:.3f} ({small}) -> {last:.3f} ({large})",
            check=le(n["last"], n["first"]),
            source="rethinking", where="App. C.2, Fig. 13", numbers=n,
            # the two sizes are different models: a seed's initial weights and batches are
            # not shared between them, so their per-seed distances are unpaired (Welch)
            paired=False))
    return judge_all(specs)
