"""The ``pitfalls`` summary: each demonstration's measured numbers (the claims judge them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from actlab.experiments.pitfalls.claims import DEMOS

if TYPE_CHECKING:
    from actlab.experiments.pitfalls import PitfallsConfig


def build_summary(config: PitfallsConfig, table) -> dict:
    """Each demonstration's numbers (first seed), one dict per demonstration."""
    seed = int(table["seed"].min())
    rows = table[table["seed"] == seed]
    summary: dict = {"seed": seed, "epochs": config.epochs}
    for demo in DEMOS:
        sel = rows[rows["run"] == demo]
        summary[demo] = dict(zip(sel["metric"], sel["value"].astype(float)))
    return summary
