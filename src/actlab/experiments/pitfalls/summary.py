"""The ``pitfalls`` summary: each demonstration's numbers and whether its relation held."""

from __future__ import annotations

from typing import TYPE_CHECKING

from actlab.experiments.pitfalls.claims import DEMOS, expected_relations

if TYPE_CHECKING:
    from actlab.experiments.pitfalls import PitfallsConfig


def build_summary(config: PitfallsConfig, table) -> dict:
    """Each demonstration's numbers (first seed) and whether its expected relation held."""
    seed = int(table["seed"].min())
    rows = table[table["seed"] == seed]
    summary: dict = {"seed": seed, "epochs": config.epochs}
    for demo in DEMOS:
        sel = rows[rows["run"] == demo]
        summary[demo] = dict(zip(sel["metric"], sel["value"].astype(float)))
    for demo, (relation, held) in expected_relations(summary).items():
        summary[demo]["expected"] = relation
        summary[demo]["held"] = held
    return summary
