"""Planning a run: configs from scale + overrides, seed groups, grid points and unit ids.

A run (``actlab run``) is a sweep with a single grid point. Every unit of work is
identified by a stable hash of its grid point, its ``units(config)`` entry and its seeds,
so the same command always plans the same ids and ``--resume`` can find finished ones.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from dataclasses import dataclass, field
from typing import Any

from actlab.errors import ConfigError
from actlab.runner.config import build_config
from actlab.runner.experiment import Experiment

SCALES = ("quick", "default", "full", "paper")


@dataclass(frozen=True)
class PlannedUnit:
    """One unit of work: a grid point, an entry of ``units(config)`` and a group of seeds."""

    point: dict[str, str]
    unit: dict[str, Any]
    seeds: tuple[int, ...]
    order: int = 0  # position in the plan; fixes the row order of the assembled table

    @property
    def id(self) -> str:
        """Stable 16-hex-digit id of this unit (independent of plan order)."""
        return unit_id(self.point, self.unit, self.seeds)


@dataclass
class Plan:
    """Everything a run will execute: configs per grid point and the units."""

    experiment: Experiment
    scale: str
    seeds: list[int]
    overrides: dict[str, Any]
    points: list[dict[str, str]]
    configs: list[Any]  # one config per grid point, same order
    units: list[PlannedUnit] = field(default_factory=list)

    def config_for(self, point: dict[str, str]) -> Any:
        """The config of grid point ``point``."""
        return self.configs[self.points.index(point)]


def unit_id(point: dict[str, Any], unit: dict[str, Any], seeds: tuple[int, ...] | list[int]) -> str:
    """Stable hash of a unit (grid point, unit dict, seeds)."""
    payload = json.dumps(
        {"point": point, "unit": unit, "seeds": list(seeds)}, sort_keys=True, default=str
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]


def seed_values(n_seeds: int) -> list[int]:
    """Seed values used for ``--seeds N``: ``0 .. N-1``."""
    if n_seeds < 1:
        raise ConfigError("--seeds", f"must be >= 1, got {n_seeds}")
    return list(range(n_seeds))


def seed_groups(seeds: list[int], per_unit: int | None) -> list[tuple[int, ...]]:
    """Split seeds into groups of ``per_unit`` (``None``: one group with all seeds)."""
    if per_unit is None:
        return [tuple(seeds)]
    if per_unit < 1:
        raise ValueError(f"seeds_per_unit must be >= 1 or None, got {per_unit}")
    return [tuple(seeds[i : i + per_unit]) for i in range(0, len(seeds), per_unit)]


def parse_grid(items: list[str] | tuple[str, ...]) -> dict[str, list[str]]:
    """Parse ``--grid key=v1,v2`` items into ``{key: [v1, v2]}``.

    Values are separated by ``|`` when the text contains one (for list-valued fields whose
    single value has commas), otherwise by ``,``. Repeating a key appends values.
    """
    grid: dict[str, list[str]] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key or not raw.strip():
            raise ConfigError(item or "--grid", "expected key=v1,v2")
        parts = raw.split("|") if "|" in raw else raw.split(",")
        values = [p.strip() for p in parts if p.strip()]
        grid.setdefault(key, [])
        grid[key].extend(v for v in values if v not in grid[key])
    return grid


def grid_points(grid: dict[str, list[str]]) -> list[dict[str, str]]:
    """Cartesian product of a grid, in the order keys and values were given."""
    if not grid:
        return [{}]
    keys = list(grid)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(grid[k] for k in keys))]


def point_label(point: dict[str, Any]) -> str:
    """Readable label of a grid point, e.g. ``lr=0.1,width=4`` (empty for a plain run)."""
    return ",".join(f"{k}={v}" for k, v in point.items())


def slug(text: str, limit: int = 80) -> str:
    """A file-name-safe version of ``text``; long ones are shortened with a hash suffix."""
    safe = re.sub(r"[^A-Za-z0-9._=,+-]+", "-", text).strip("-.") or "x"
    if len(safe) > limit:
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]
        safe = f"{safe[: limit - 9]}-{digest}"
    return safe


def scale_overrides(experiment: Experiment, scale: str) -> dict[str, Any]:
    """The field overrides a scale implies (``default`` has none; ``paper`` the values of the
    experiment's :class:`~actlab.runner.paper.PaperPreset`)."""
    if scale not in SCALES:
        raise ConfigError("scale", f"must be one of {', '.join(SCALES)}, got {scale!r}")
    if scale == "paper":
        from actlab.runner.paper import paper_preset

        return paper_preset(experiment).overrides()
    return dict({"quick": experiment.quick, "full": experiment.full}.get(scale, {}))


def default_run_name(
    scale: str, overrides: dict[str, Any], grid: dict[str, list[str]] | None = None,
    n_seeds: int | None = None, default_seeds: int | None = None,
) -> str:
    """Deterministic readable run name: the scale, then ``--set``/``--grid`` values, then seeds.

    Examples: ``quick``, ``default``, ``quick_lr=0.1``, ``sweep-quick_lr=0.1,0.01``,
    ``default_seeds=5``.
    """
    parts = [scale]
    parts += [f"{k}={v}" for k, v in overrides.items()]
    if grid:
        parts += [f"{k}={','.join(v)}" for k, v in grid.items()]
    if n_seeds is not None and default_seeds is not None and n_seeds != default_seeds:
        parts.append(f"seeds={n_seeds}")
    name = "_".join(parts)
    return slug(("sweep-" if grid else "") + name)


def make_plan(
    experiment: Experiment,
    scale: str = "default",
    overrides: dict[str, Any] | None = None,
    grid: dict[str, list[str]] | None = None,
    n_seeds: int | None = None,
) -> Plan:
    """Build and validate every config and list the units; config problems raise ``ConfigError``."""
    overrides = dict(overrides or {})
    grid = dict(grid or {})
    if scale == "paper":  # data=PATH to the preset's data field; refused without it
        from actlab.runner.paper import paper_overrides, paper_seeds

        overrides = paper_overrides(experiment, overrides)
        if n_seeds is None:
            n_seeds = paper_seeds(experiment)
    for key in grid:
        if key in overrides:
            raise ConfigError(key, "given both in --set and --grid")
    seeds = seed_values(experiment.default_seeds if n_seeds is None else n_seeds)
    base = {**scale_overrides(experiment, scale), **overrides}
    points = grid_points(grid)
    configs = [build_config(experiment.Config, {**base, **point}) for point in points]
    plan = Plan(experiment, scale, seeds, overrides, points, configs)
    groups = seed_groups(seeds, experiment.seeds_per_unit)
    for point, config in zip(points, configs):
        entries = experiment.units(config)
        for entry in entries:
            for group in groups:
                plan.units.append(PlannedUnit(point, dict(entry), group, len(plan.units)))
    ids = [u.id for u in plan.units]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{experiment.name}: units(config) returned duplicate entries")
    return plan
