"""The experiment contract every actlab experiment implements.

An experiment is a subclass of :class:`Experiment`, decorated with :func:`register`,
living in a package of ``actlab.experiments`` (packages there are discovered
automatically; see that package's docstring for their shape). The runner splits an experiment into *units of work*: one entry of
``units(config)`` times a group of seeds (``seeds_per_unit``; ``None`` puts all seeds
in one unit so that a vmapped ensemble trains them together). Each unit returns a
:class:`UnitResult` that the runner saves atomically as soon as it ends, so a sweep can
resume. When all units are done, ``summarize`` reads the tidy table of every unit's rows,
draws figures and returns ``summary.json``'s content; ``claims`` turns that summary
into the rows of the reproduction table (claim, from a document or ours; value measured;
held?).
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

# What a unit receives and returns, and its statuses, live below the runner (recipes fill
# them); they are part of the experiment contract, so they are re-exported here.
from actlab.recipes.unit import (  # noqa: F401 - re-exported
    METRIC_COLUMNS,
    STATUS_DIVERGED,
    STATUS_FAILED,
    STATUS_OK,
    UnitContext,
    UnitResult,
)


@dataclass
class Claim:
    """One row of the headline table: a claim (a document's or ours), what we measured, whether
    it held.

    ``claim``, ``measured`` and ``source`` are text for people. ``id`` addresses the claim
    across runs (``experiment/condition/slug``), ``value`` is the number measured (``None``
    when it cannot be measured), judged by ``comparison`` against ``threshold`` (and, for
    ``"within"``, ``reference``); see :mod:`actlab.runner.claims`. ``held`` is ``None`` when
    the measurement cannot decide (e.g. too few seeds).
    """

    claim: str
    measured: str
    held: bool | None
    source: str = ""
    id: str = ""
    value: float | None = None
    comparison: str = ""
    threshold: float | None = None
    reference: float | None = None
    # Filled by a ClaimSpec: the whole check as data, the source's key and the section,
    # figure or table cited, the numbers quoted from it (name -> value), our own predictions
    # among the numbers (name -> value), a failed precondition.
    check: dict[str, Any] | None = None
    source_key: str = ""
    where: str = ""
    quoted: dict[str, float] = field(default_factory=dict)
    predicted: dict[str, float] = field(default_factory=dict)
    precondition: str = ""
    # How the claim is judged over seeds (see actlab.runner.verdicts): its two sides paired
    # per seed, or judged on one value (a closed form, a theory check, an exact count); and
    # what the runner's verdict rests on: seeds, the 95 % interval of the main quantity
    # (value - bound, or value - reference), the seeds an undecided claim would need, why.
    paired: bool = True
    deterministic: bool = False
    n: int | None = None
    interval: list[float] | None = None
    seeds_needed: int | None = None
    reason: str = ""
    post_hoc: str = ""  # why the bar was chosen after our values were seen; empty: before

    def __post_init__(self) -> None:
        self.held = None if self.held is None else bool(self.held)
        for name in ("value", "threshold", "reference"):
            number = getattr(self, name)
            if number is not None:
                setattr(self, name, float(number))


@dataclass
class RunContext:
    """Services the runner hands to ``summarize``: where the run directory and figures are."""

    out_dir: Path
    figures_dir: Path
    # False while the runner summarises one seed alone for the claims' samples: figures are
    # closed unsaved (the run's figures show all seeds).
    draw: bool = True

    def save_figure(self, fig: Any, name: str) -> Path:
        """Save a matplotlib figure as ``figures/<name>.png`` and close it."""
        from actlab.plotting import pyplot

        plt = pyplot()
        path = self.figures_dir / f"{name}.png"
        if not self.draw:
            plt.close(fig)
            return path
        self.figures_dir.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(fig)
        return path


ConfigT = TypeVar("ConfigT")


class Experiment:
    """Base class of experiments; see the module docstring for the life cycle."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    Config: ClassVar[type] = object  # a dataclass (a CheckedConfig: checks as field metadata)
    quick: ClassVar[dict[str, Any]] = {}  # field overrides for --quick
    full: ClassVar[dict[str, Any]] = {}  # field overrides for --full
    # The documents' setting for --paper: a runner.paper.PaperPreset (values with sources,
    # the data set it needs); None when the documents state none beyond the default.
    paper: ClassVar[Any] = None
    default_seeds: ClassVar[int] = 3
    seeds_per_unit: ClassVar[int | None] = 1  # None: all seeds in one unit (ensembles)
    headline_figure: ClassVar[str | None] = None  # figures/<name>.png shown in the index
    # Why the experiment computes on the CPU whatever ``--device`` says (hand-sized float64
    # examples gain nothing from an accelerator); empty: it runs on the unit's device.
    host_only: ClassVar[str] = ""
    # Whether ``run_unit`` trains data-parallel on ``ctx.dist`` (each global batch sharded by
    # rank, per-sample draws indexed by the global sample), so ``actlab run --nproc N`` may
    # run each unit under torchrun with results that do not depend on N.
    distributed: ClassVar[bool] = False

    def units(self, config: Any) -> list[dict[str, Any]]:
        """Split the work besides seeds (e.g. one unit per activation). JSON-serialisable dicts."""
        return [{}]

    def run_unit(
        self, config: Any, unit: dict[str, Any], seeds: list[int], ctx: UnitContext
    ) -> UnitResult:
        """Run one unit of work and return its rows; must be deterministic given the seeds."""
        raise NotImplementedError

    def workloads(self, config: Any, unit: dict[str, Any]) -> list[Any]:
        """What one seed of ``unit`` trains, for ``actlab plan``: a list of
        :class:`actlab.runner.cost.Workload` (model built on the meta device, example batch,
        steps, optimizer). Experiments without one cannot be priced."""
        raise NotImplementedError(f"{self.name} has no cost model for `actlab plan`")

    def summarize(self, config: Any, table: Any, results: list[dict[str, Any]], ctx: RunContext) -> dict:
        """Headline numbers for ``summary.json`` (and figures via ``ctx.save_figure``).

        ``table`` is a pandas DataFrame with :data:`METRIC_COLUMNS`; ``results`` lists, per
        unit, ``{"unit": dict, "seeds": list, "status": str, "error": str|None, "data": dict}``.
        """
        return {}

    def claims(self, summary: dict) -> list[Claim]:
        """Rows for the headline table of ``actlab reproduce``."""
        return []


_REGISTRY: dict[str, type[Experiment]] = {}
_DISCOVERED = False


def register(cls: type[Experiment]) -> type[Experiment]:
    """Class decorator adding an experiment to the registry under ``cls.name``."""
    if not cls.name:
        raise ValueError(f"{cls.__name__} has no name")
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"experiment {cls.name!r} registered twice")
    if not dataclasses.is_dataclass(cls.Config):
        raise TypeError(f"{cls.__name__}.Config must be a dataclass")
    _REGISTRY[cls.name] = cls
    return cls


def _discover() -> None:
    global _DISCOVERED
    if _DISCOVERED:
        return
    import actlab.experiments as package

    for info in pkgutil.iter_modules(package.__path__):
        if info.ispkg and not info.name.startswith("_"):
            importlib.import_module(f"actlab.experiments.{info.name}")
    _DISCOVERED = True


def list_experiments() -> dict[str, type[Experiment]]:
    """All registered experiments by name (discovers ``actlab.experiments`` packages)."""
    _discover()
    return dict(sorted(_REGISTRY.items()))


def get_experiment(name: str) -> Experiment:
    """An instance of the experiment ``name``; unknown names raise ``ValueError`` with suggestions."""
    from actlab.errors import did_you_mean

    experiments = list_experiments()
    if name not in experiments:
        hint = did_you_mean(name, experiments, n=3, cutoff=0.4, prefix="; ")
        raise ValueError(f"unknown experiment {name!r}{hint} (see `actlab run --list`)")
    return experiments[name]()
