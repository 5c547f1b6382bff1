"""Probes that measure activation statistics inside any model while it trains.

``Probe`` (construction, schedule, lifecycle; its ``hooks`` and its ``records``: flush,
table, writers, checkpoint, in their own modules), ``collectors`` (one class per metric family
and the registry behind ``register_metric``), ``measure`` (``measure_once``, the one-shot
pass), ``metrics`` (vocabulary and reductions), ``schedule``
(every N / log-spaced / listed steps), ``writers`` (CSV, Parquet, JSONL, TensorBoard, MLflow, W&B) and
``plots``. Names are imported lazily so that importing the package stays cheap.
"""

from __future__ import annotations

from actlab._lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "Probe": ".probe",
    "Schedule": ".schedule",
    "Every": ".schedule",
    "LogSpaced": ".schedule",
    "AtSteps": ".schedule",
    "ALL_METRICS": ".metrics",
    "Collector": ".collectors",
    "register_metric": ".collectors",
    "available_metrics": ".collectors",
    "measure_once": ".measure",
    "TensorBoardWriter": ".writers",
    "MLflowWriter": ".writers",
    "WandbWriter": ".writers",
    "JsonlWriter": ".writers",
    "plot_metric": ".plots",
    "plot_histogram_strip": ".plots",
})
