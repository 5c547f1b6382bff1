"""The run's claims as intervals: one row per claim judged on a sample, its 95 % interval of
the judged quantity (value minus its bar per seed) against the bar at 0, coloured by verdict.

Every comparison an experiment makes over seeds is drawn here with its interval, whatever
the experiment's own figures show.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from actlab.runner.claims import COMBINATORS
from actlab.runner.experiment import RunContext

COLOURS = {True: "#1a7f37", False: "#b42318", None: "#8a6d00"}
MAX_ROWS = 40  # beyond this the figure is split into several files


def _rows(claims: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for c in claims if c.get("interval") and c.get("check", {}) is not None]


def _margin(claim: dict[str, Any]) -> tuple[float, float] | None:
    """The band the interval must fall in for ``within`` claims (``None`` for inequalities)."""
    check = claim.get("check") or {}
    if check.get("op") == "within" and check.get("bound") is not None:
        return -float(check["bound"]), float(check["bound"])
    return None


def _leaf_op(claim: dict[str, Any]) -> str:
    """What the main quantity must satisfy: ``< 0``, ``>= 0``, ``within ±tol``..."""
    check = claim.get("check") or {}
    while check.get("op") in COMBINATORS and check.get("parts"):
        check = check["parts"][0]
    op = check.get("op", "")
    if op == "within":
        return f"within ±{check.get('bound', 0):.3g}"
    if op == "within-factor":
        return f"log ratio within ±log {check.get('bound', 0):.3g}"
    return f"{op} 0" if op in ("<", "<=", ">", ">=") else op


def draw_claims_figure(claims: Sequence[dict[str, Any]], ctx: RunContext,
                       name: str = "claims_intervals") -> list[str]:
    """Draw the intervals of ``claims`` (those with one) into ``figures/<name>[_k].png``;
    returns the figure names written (none when no claim has an interval)."""
    rows = _rows(claims)
    if not rows:
        return []
    from actlab.plotting import pyplot

    plt = pyplot()
    names = []
    chunks = [rows[i:i + MAX_ROWS] for i in range(0, len(rows), MAX_ROWS)]
    for k, chunk in enumerate(chunks):
        fig, ax = plt.subplots(figsize=(8, 0.32 * len(chunk) + 1.2))
        for i, claim in enumerate(chunk):
            low, high = claim["interval"]
            colour = COLOURS[claim.get("held")]
            y = len(chunk) - 1 - i
            ax.plot([low, high], [y, y], color=colour, lw=2.5, solid_capstyle="butt")
            ax.plot([(low + high) / 2], [y], "o", color=colour, ms=4)
            band = _margin(claim)
            if band:
                ax.plot(band, [y, y], "|", color="0.3", ms=9)
        ax.axvline(0.0, color="0.4", lw=0.8, ls="--")
        labels = [f"{c['id']}{' @ ' + c['point'] if c.get('point') else ''} "
                  f"[{_leaf_op(c)}] (n={c.get('n')})" for c in chunk]
        ax.set_yticks(range(len(chunk)), labels[::-1], fontsize=7)
        ax.set_xscale("symlog", linthresh=1e-3)
        ax.set_xlabel("95 % interval of value - bar over seeds (within: value - reference; "
                      "| marks the margin)", fontsize=8)
        ax.set_title("claims over seeds: green held, red not held, amber undecided", fontsize=9)
        figure_name = name if len(chunks) == 1 else f"{name}_{k + 1}"
        ctx.save_figure(fig, figure_name)
        names.append(figure_name)
    return names
