"""One unit of work: what the runner hands a recipe and what the recipe hands back.

The runner (:mod:`actlab.runner`) splits an experiment into units (a condition times a group
of seeds) and calls the experiment's ``run_unit`` with a :class:`UnitContext`; the recipes
that run a unit fill a :class:`UnitResult`: rows of the tidy table
(:data:`METRIC_COLUMNS`), small extras and a status. These types live here, below the runner,
so that a recipe needs nothing of the runner; :mod:`actlab.runner.experiment` re-exports them
as part of the experiment contract.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from actlab.train.distributed import DistInfo

# A unit's status: the trainer's own two (one home, re-exported here) and ``failed``.
from actlab.train.loop import STATUS_DIVERGED, STATUS_OK

__all__ = ["METRIC_COLUMNS", "STATUS_DIVERGED", "STATUS_FAILED", "STATUS_OK", "UnitContext",
           "UnitResult"]

# Column order of the tidy metrics table shared by every experiment.
METRIC_COLUMNS = ("run", "seed", "step", "layer", "metric", "value")

STATUS_FAILED = "failed"


@dataclass
class UnitResult:
    """What one unit of work produced.

    ``rows`` are tuples in :data:`METRIC_COLUMNS` order (``run`` names the condition,
    e.g. ``"relu/shifted"``; ``layer`` is ``""`` for model-wide metrics). ``data`` holds
    small JSON-serialisable extras that ``summarize`` needs beyond the table (e.g. a few
    image arrays as nested lists). ``status`` is ``ok``, ``diverged`` (non-finite loss;
    rows up to that point are kept) or ``failed`` (an exception; ``error`` has it).
    """

    rows: list[tuple] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    status: str = STATUS_OK
    error: str | None = None

    def add(self, run: str, seed: int, step: int, layer: str, metric: str, value: float) -> None:
        """Append one row of the tidy table."""
        self.rows.append((run, int(seed), int(step), layer, metric, float(value)))


@dataclass
class UnitContext:
    """Services the runner hands to ``run_unit``.

    ``workdir`` is a private scratch folder for this unit (checkpoints), ``device`` where to
    compute, and ``progress`` wraps an iterable in a progress bar (quiet when not a TTY).
    ``dist`` is this process's place when the unit runs data-parallel under torchrun
    (``actlab run --nproc N``): every rank runs ``run_unit``, a recipe that supports it
    shards each global batch by ``dist.rank``, and the runner keeps rank 0's result.
    ``None`` (the default): one process on ``device``.
    """

    workdir: Path
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    progress: Callable[..., Iterable] = lambda it, **_: it
    dist: DistInfo | None = None
