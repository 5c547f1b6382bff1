"""Reference results: each experiment's claims as measured at its reference scale.

A quick run is a smoke test; whether a document's finding holds is decided at scale. The
reference runs live in the repository under ``docs/results/<experiment>/`` (summary,
claims, config, env with commit, machine and wall time, figures); their claim values are
collected into ``references.json`` next to this module (by ``tools/collect_references.py``)
so that an installed actlab can show, next to every claim of a run, the reference value and
whether it held there.

An experiment's entry is ``{"status": ..., "scale": ..., "commit": ..., "wall_s": ...,
"note": ..., "claims": {claim_id: {"value": float|None, "held": bool|None,
"measured": str, "n": int|None, "interval": [low, high]|None, "seeds_needed": int|None,
"reason": str}}}`` (the verdict over seeds: :mod:`actlab.runner.verdicts`). ``status`` is ``"reference"`` for a completed
run, or ``"pending (...)"`` (e.g. ``"pending (needs GPU)"``) when no reference exists yet,
with ``note`` saying why. An experiment whose ``--full`` run is kept too has it under
``"full"`` (same fields: scale, seeds, commit, wall time, claims). ``"recipe"``, where present,
says with which settings a reference measured before a change of the experiment's defaults
runs again.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

REFERENCES_FILE = Path(__file__).with_name("references.json")
REFERENCE = "reference"


@lru_cache(maxsize=1)
def load_references(path: str | None = None) -> dict[str, dict[str, Any]]:
    """The reference table, ``{experiment: entry}`` (empty if the file is missing)."""
    file = Path(path) if path else REFERENCES_FILE
    if not file.exists():
        return {}
    return json.loads(file.read_text())


def experiment_of(claim_id: str) -> str:
    """The experiment part of a claim id (``"signal/relu-he/x"`` -> ``"signal"``)."""
    return claim_id.split("/", 1)[0]


def reference_for(claim_id: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """``(experiment entry, claim entry)`` of ``claim_id``; ``({}, None)`` if unknown."""
    entry = load_references().get(experiment_of(claim_id), {})
    return entry, entry.get("claims", {}).get(claim_id)


def verdict_text(held: bool | None) -> str:
    """``held``, ``not held`` or ``undecided``."""
    return {True: "held", False: "not held"}.get(held, "undecided")


def reference_text(claim_id: str) -> str:
    """One cell of text: the reference value, its spread and whether it held there."""
    entry, claim = reference_for(claim_id)
    status = entry.get("status", "")
    if not entry:
        return "no reference"
    if status != REFERENCE:
        return status
    if claim is None:
        return "not in the reference run"
    text = claim_cell(claim, entry.get("scale", "?"))
    full = entry.get("full", {})
    if claim_id in full.get("claims", {}):
        text += "; " + claim_cell(full["claims"][claim_id], full.get("scale", "full"))
    return text


def claim_cell(claim: dict[str, Any], scale: str | None = None) -> str:
    """``"0.0091, 95 % CI [0.002, 0.016] n=3 (held, default)"``: value, the interval of the
    judged difference over seeds, verdict, scale."""
    value, interval = claim.get("value"), claim.get("interval")
    text = "" if value is None else f"{value:.4g}"
    if interval:
        text += f"{', ' if text else ''}95 % CI [{interval[0]:.3g}, {interval[1]:.3g}] n={claim.get('n')}"
    where = f", {scale}" if scale else ""
    return f"{text} ({verdict_text(claim.get('held'))}{where})".strip()


def reference_held(claim_id: str) -> bool | None:
    """Whether the claim held at reference scale (``None``: undecided, pending or unknown)."""
    _, claim = reference_for(claim_id)
    return None if claim is None else claim.get("held")


def reference_summary(experiment: str) -> str:
    """One cell for an experiment: ``"14/16 held (default)"`` or its pending status."""
    entry = load_references().get(experiment)
    if not entry:
        return "no reference"
    if entry.get("status") != REFERENCE:
        return entry.get("status", "")
    held = [c.get("held") for c in entry.get("claims", {}).values()]
    return f"{held.count(True)}/{len(held)} held ({entry.get('scale', '?')})"
