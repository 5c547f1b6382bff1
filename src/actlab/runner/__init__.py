"""Experiment runner: run directories, sweeps, reports and the experiment contract
(:mod:`actlab.runner.experiment`). Names are imported on first use."""

from __future__ import annotations

from actlab._lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "Claim": ".experiment",
    "Experiment": ".experiment",
    "RunContext": ".experiment",
    "UnitContext": ".experiment",
    "UnitResult": ".experiment",
    "get_experiment": ".experiment",
    "list_experiments": ".experiment",
    "register": ".experiment",
    "CheckedConfig": ".fields",
    "checked": ".fields",
    "ClaimSpec": ".claims",
    "RunOptions": ".driver",
    "run_experiment": ".driver",
    "RunDir": ".rundir",
    "Plan": ".plan",
    "make_plan": ".plan",
    "cite": ".sources",
})
