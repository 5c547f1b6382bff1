"""Metric families and their registry: which collector produces which metric name.

Built-in families live in :mod:`~actlab.probe.collectors.builtin`; a user adds one with
:func:`register_metric` (a function of one pass, or a :class:`Collector` subclass) and then
names its metric in ``Probe(metrics=...)`` or :func:`actlab.measure_once`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from actlab.probe.collectors.base import TARGETS, Collector, FunctionMetric
from actlab.probe.collectors.builtin import BUILTIN

__all__ = ["Collector", "FunctionMetric", "TARGETS", "available_metrics", "collector_of",
           "collectors_for", "register_metric", "unregister_metric"]

_REGISTRY: dict[str, Collector] = {name: c for c in BUILTIN for name in c.metrics}
_BUILTIN_NAMES = frozenset(_REGISTRY)


def available_metrics() -> tuple[str, ...]:
    """Every metric name a probe can record (built-in and registered)."""
    return tuple(_REGISTRY)


def collector_of(name: str) -> Collector:
    """The collector producing metric ``name``; ``ValueError`` naming the closest names."""
    try:
        return _REGISTRY[name]
    except KeyError:
        from actlab.surgery import closest_names

        raise ValueError(f"unknown metric {name!r}; closest: "
                         f"{closest_names(name, list(_REGISTRY))}") from None


def collectors_for(metrics: Iterable[str]) -> list[Collector]:
    """The distinct collectors needed for ``metrics``, in first-use order."""
    out: dict[int, Collector] = {}
    for name in metrics:
        collector = collector_of(name)
        out.setdefault(id(collector), collector)
    return list(out.values())


def register_metric(metric: str | Collector, fn: Callable[..., Any] | None = None, *,
                    target: str = "site", reduce: str = "mean",
                    replace: bool = False) -> Collector:
    """Add a metric to every probe without editing actlab.

    Either a name and a function of one pass::

        actlab.register_metric("act_l1", lambda p, a: a.abs().mean())       # site: (p, a)
        actlab.register_metric("h_peak", lambda h: h.abs().amax(), target="block", reduce="max")

    or a :class:`Collector` instance (a whole family with its own device reduction and
    host-side combine). ``target`` is one of :data:`TARGETS` (see
    :mod:`actlab.probe.collectors.base`), ``reduce`` pools the per-pass values of a function
    (``mean`` weighted by elements, ``max``, ``min``, ``sum``). Built-in names cannot be
    replaced; a registered name only with ``replace=True``. Returns the collector.
    """
    if isinstance(metric, Collector):
        collector, names = metric, tuple(metric.metrics)
        if not names:
            raise ValueError(f"{type(metric).__name__}.metrics is empty")
    else:
        if not isinstance(metric, str) or not metric.isidentifier():
            raise ValueError(f"metric name must be an identifier string, got {metric!r}")
        if not callable(fn):
            raise ValueError(f"register_metric({metric!r}, fn): fn must be callable, got {fn!r}")
        if reduce not in FunctionMetric.REDUCTIONS:
            raise ValueError(f"reduce must be one of {FunctionMetric.REDUCTIONS}, got {reduce!r}")
        if target not in ("site", "block", "input"):
            raise ValueError(f"target of a function metric must be 'site', 'block' or 'input', "
                             f"got {target!r}")
        collector, names = FunctionMetric(metric, fn, target, reduce), (metric,)
    if collector.target not in TARGETS:
        raise ValueError(f"unknown target {collector.target!r}; choose from {TARGETS}")
    for name in names:
        if name in _BUILTIN_NAMES:
            raise ValueError(f"metric {name!r} is built in and cannot be replaced")
        if name in _REGISTRY and not replace:
            raise ValueError(f"metric {name!r} is already registered (pass replace=True)")
    for name in names:
        _REGISTRY[name] = collector
    return collector


def unregister_metric(name: str) -> None:
    """Remove a registered (not built-in) metric; unknown names are ignored."""
    if name in _BUILTIN_NAMES:
        raise ValueError(f"metric {name!r} is built in and cannot be removed")
    _REGISTRY.pop(name, None)
