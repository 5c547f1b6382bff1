"""Probes that measure activation statistics inside any model while it trains.

``Probe`` (construction, schedule, lifecycle; its ``hooks`` and its ``records``: flush,
table, writers, checkpoint, in their own modules), ``collectors`` (one class per metric family
and the registry behind ``register_metric``), ``measure`` (``measure_once``, the one-shot
pass), ``metrics`` (vocabulary and reductions), ``schedule``
(every N / log-spaced / listed steps), ``writers`` (CSV, Parquet, JSONL, TensorBoard, MLflow, W&B) and
``plots``. Names are imported lazily so that importing the package stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "Probe": "actlab.probe.probe:Probe",
    "Schedule": "actlab.probe.schedule:Schedule",
    "Every": "actlab.probe.schedule:Every",
    "LogSpaced": "actlab.probe.schedule:LogSpaced",
    "AtSteps": "actlab.probe.schedule:AtSteps",
    "ALL_METRICS": "actlab.probe.metrics:ALL_METRICS",
    "Collector": "actlab.probe.collectors:Collector",
    "register_metric": "actlab.probe.collectors:register_metric",
    "available_metrics": "actlab.probe.collectors:available_metrics",
    "measure_once": "actlab.probe.measure:measure_once",
    "TensorBoardWriter": "actlab.probe.writers:TensorBoardWriter",
    "MLflowWriter": "actlab.probe.writers:MLflowWriter",
    "WandbWriter": "actlab.probe.writers:WandbWriter",
    "JsonlWriter": "actlab.probe.writers:JsonlWriter",
    "plot_metric": "actlab.probe.plots:plot_metric",
    "plot_histogram_strip": "actlab.probe.plots:plot_histogram_strip",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'actlab.probe' has no attribute {name!r}")
    module_name, attr = target.split(":")
    value = getattr(importlib.import_module(module_name), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
