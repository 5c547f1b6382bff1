"""The ``drift-theory`` summary: per part and seed, the numbers of the whole part, the
per-unit arrays (unit ``i`` of layer ``l``) and the per-site values of the covariance MLPs,
read back from the tidy table; and the pooling the claims use across seeds."""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import TYPE_CHECKING, Any

import numpy as np

from actlab.analysis import finite_or_none, seeds_in

if TYPE_CHECKING:
    from actlab.experiments.drift_theory import DriftTheoryConfig


def _index(label: str, prefix: str) -> int:
    return int(label[len(prefix) :])


def build_summary(config: DriftTheoryConfig, table: Any) -> dict:
    """``{"k", "seeds", "parts": {run: {seed: {"scalars", "units", "layers"}}}}``."""
    summary: dict[str, Any] = {
        "k": config.k,
        "seeds": seeds_in(table) if len(table) else [],
        "parts": {},
    }
    for run in sorted(table["run"].unique()):
        part: dict[str, Any] = {}
        for seed in sorted(table[table["run"] == run]["seed"].unique()):
            rows = table[(table["run"] == run) & (table["seed"] == seed)]
            scalars = {
                m: finite_or_none(v)
                for m, v in zip(
                    rows[rows["layer"] == ""]["metric"], rows[rows["layer"] == ""]["value"]
                )
            }
            units: dict[str, list[float | None]] = {}
            per_unit = rows[rows["layer"].str.startswith("unit")]
            for metric in per_unit["metric"].unique():
                sel = per_unit[per_unit["metric"] == metric]
                order = sorted(zip((_index(u, "unit") for u in sel["layer"]), sel["value"]))
                units[metric] = [finite_or_none(v) for _, v in order]
            layers: dict[str, dict[str, float | None]] = {}
            per_site = rows[rows["layer"].str.startswith("layer")]
            for metric in per_site["metric"].unique():
                sel = per_site[per_site["metric"] == metric]
                order = sorted(zip((_index(u, "layer") for u in sel["layer"]), sel["value"]))
                layers[metric] = {f"layer{i}": finite_or_none(v) for i, v in order}
            part[str(int(seed))] = {"scalars": scalars, "units": units, "layers": layers}
        summary["parts"][run] = part
    return summary


def family_k(k: float, size: float) -> float:
    """The bar for the largest of ``size`` |z|-scores that keeps the family's false-alarm
    chance at that of one |z| > ``k`` (Bonferroni): ``Φ⁻¹(1 − (1 − Φ(k)) / size)``."""
    if not size or size < 1 or not math.isfinite(size):
        return k
    tail = (1.0 - NormalDist().cdf(k)) / size
    return NormalDist().inv_cdf(1.0 - tail)


def records(summary: dict, run: str) -> list[dict[str, Any]]:
    """The per-seed records of part ``run`` (empty when the part did not run)."""
    return list(summary.get("parts", {}).get(run, {}).values())


def scalar(record: dict, key: str) -> float | None:
    """A number of a record (``None`` when missing)."""
    return record["scalars"].get(key)


def pooled(recs: list[dict], key: str) -> tuple[float | None, float | None]:
    """Inverse-variance mean of ``key`` (standard error ``key_se``) over seeds: the seeds
    estimate the same quantity (ratios, exponents, the layer's Gram scale)."""
    pairs = [(scalar(r, key), scalar(r, f"{key}_se")) for r in recs]
    pairs = [(v, s) for v, s in pairs if v is not None and s is not None and s > 0]
    if not pairs:
        return None, None
    weights = np.array([1.0 / s**2 for _, s in pairs])
    values = np.array([v for v, _ in pairs])
    return float((weights * values).sum() / weights.sum()), float(1.0 / math.sqrt(weights.sum()))


def worst(recs: list[dict], key: str, size_key: str | None = None) -> tuple[float | None, float]:
    """The largest ``key`` over seeds and the family size (``size_key`` summed over seeds)."""
    values = [scalar(r, key) for r in recs]
    values = [v for v in values if v is not None]
    size = sum(scalar(r, size_key) or 0.0 for r in recs) if size_key else float(len(recs))
    return (max(values) if values else None), size


def least(recs: list[dict], key: str) -> float | None:
    """The smallest ``key`` over seeds."""
    values = [v for v in (scalar(r, key) for r in recs) if v is not None]
    return min(values) if values else None


def pooled_z(recs: list[dict], key: str) -> float | None:
    """The largest |estimate − closed form| / SE of ``key`` (with ``key_se``, ``key_closed``)
    over seeds, for p-dependent sums that cannot be pooled across seeds."""
    zs = []
    for r in recs:
        value, se, closed = (scalar(r, key), scalar(r, f"{key}_se"), scalar(r, f"{key}_closed"))
        if None not in (value, se, closed) and se > 0:
            zs.append(abs(value - closed) / se)
    return max(zs) if zs else None
