"""Judging a kept run's claims again, without its units, with today's claim code.

A run folder keeps ``summary.json`` (all seeds) and ``seed_summaries.json`` (every seed
alone): the claims are computed on both and judged over seeds
(:func:`actlab.runner.per_seed.judge_over_seeds`). Runs kept before seed summaries existed
may hold ``claims_per_seed.json`` instead (each claim's main value per seed): those values
form a sample only where the claim compares a single number with a bar that does not depend
on the run (found by perturbing the summary's numbers: a bar that moves with them is one
side of a comparison whose other side was not stored); anything else is left undecided with
that reason.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from actlab.runner.atomic import dumps
from actlab.runner.claims import NUMERIC_OPS
from actlab.runner.experiment import Experiment
from actlab.runner.per_seed import judge_over_seeds

SEED_SUMMARIES = "seed_summaries.json"
LEGACY_SEED_VALUES = "claims_per_seed.json"  # {claim id: [main value of seed 0, 1, ...]}
_NUDGE = 1.001  # how much every float of a summary moves when looking for constant bars

NO_SEED_DATA = "the kept run stores no per-seed summaries (it predates them); re-run to judge"
ONE_SIDE_ONLY = ("the kept run stores this claim's per-seed values for one side only and its "
                 "bar moves with the run; re-run to judge")


def claims_of(experiment: Experiment, summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The experiment's claims on ``summary`` as JSON-ready rows."""
    return [json.loads(dumps(c)) for c in experiment.claims(dict(summary)) or []]


def _nudged(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _nudged(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_nudged(v) for v in data]
    if isinstance(data, float):
        return data * _NUDGE + 1e-9
    return data


def _constant_bars(experiment: Experiment, summary: Mapping[str, Any],
                   pooled: list[dict[str, Any]]) -> set[str]:
    """Ids of single-leaf claims whose bound and reference do not move with the summary."""
    try:
        moved = {c["id"]: c.get("check") or {} for c in claims_of(experiment, _nudged(summary))}
    except Exception:  # noqa: BLE001 - a summary that breaks when nudged: nothing is constant
        return set()
    constant = set()
    for claim in pooled:
        check, other = claim.get("check") or {}, moved.get(claim["id"], {})
        if check.get("op") in NUMERIC_OPS and all(
                check.get(key) == other.get(key) for key in ("bound", "reference")):
            constant.add(claim["id"])
    return constant


def legacy_samples(experiment: Experiment, summary: Mapping[str, Any],
                   pooled: list[dict[str, Any]], values: Mapping[str, list[float]]
                   ) -> tuple[dict[int, list[dict[str, Any]]], dict[str, str]]:
    """Per-seed claims rebuilt from ``claims_per_seed.json`` values (constant bars only), and
    the reason for each claim left without a sample."""
    constant = _constant_bars(experiment, summary, pooled)
    per_seed: dict[int, list[dict[str, Any]]] = {}
    reasons: dict[str, str] = {}
    for claim in pooled:
        sample = values.get(claim["id"])
        if not sample:
            reasons[claim["id"]] = NO_SEED_DATA
        elif claim["id"] not in constant:
            reasons[claim["id"]] = ONE_SIDE_ONLY
        else:
            for seed, value in enumerate(sample):
                check = {**claim["check"], "value": value}
                per_seed.setdefault(seed, []).append({"id": claim["id"], "check": check})
    return per_seed, reasons


def rejudge_summary(experiment: Experiment, summary: Mapping[str, Any], n_seeds: int,
                    seed_summaries: Mapping[str, Any] | None = None,
                    legacy_values: Mapping[str, list[float]] | None = None
                    ) -> list[dict[str, Any]]:
    """Today's claims on a kept ``summary``, judged over its seeds' summaries (or the legacy
    per-seed values) as the runner judges a fresh run."""
    pooled = claims_of(experiment, summary)
    if seed_summaries and seed_summaries.get("summaries"):
        per_seed = {int(seed): claims_of(experiment, s) for seed, s in
                    zip(seed_summaries["seeds"], seed_summaries["summaries"])}
        return judge_over_seeds(pooled, per_seed, n_seeds)
    if seed_summaries and seed_summaries.get("error"):
        return judge_over_seeds(pooled, {}, n_seeds, seed_summaries["error"])
    if legacy_values:
        per_seed, reasons = legacy_samples(experiment, summary, pooled, legacy_values)
        return judge_over_seeds(pooled, per_seed, n_seeds, reasons)
    return judge_over_seeds(pooled, {}, n_seeds, NO_SEED_DATA)


def rejudge_folder(experiment: Experiment, folder: Path) -> list[dict[str, Any]]:
    """The claims of a kept run folder (``summary.json``, ``config.json`` and, where kept,
    ``seed_summaries.json`` or ``claims_per_seed.json``) judged again; grid runs per point
    (each row's ``point`` is its label)."""
    from actlab.runner.plan import point_label

    summary = json.loads((folder / "summary.json").read_text())
    n_seeds = len(json.loads((folder / "config.json").read_text())["seeds"])
    by_seed_path, legacy_path = folder / SEED_SUMMARIES, folder / LEGACY_SEED_VALUES
    by_seed = json.loads(by_seed_path.read_text()) if by_seed_path.exists() else None
    legacy = json.loads(legacy_path.read_text()) if legacy_path.exists() else None
    if set(summary) == {"points"}:  # a grid: {"points": [{"point": {...}, "summary": {...}}]}
        seed_points = (by_seed or {}).get("points", [])
        rows = []
        for i, entry in enumerate(summary["points"]):
            mine = seed_points[i] if i < len(seed_points) else None
            rows += [{**c, "point": point_label(entry["point"])} for c in
                     rejudge_summary(experiment, entry["summary"], n_seeds, mine)]
        return rows
    return [{**c, "point": ""} for c in
            rejudge_summary(experiment, summary, n_seeds, by_seed, legacy)]
