"""One package per built-in experiment, each registering an
:class:`actlab.runner.experiment.Experiment`.

A package holds ``__init__.py`` (the config, scales, units and ``run_unit`` calling a recipe
of :mod:`actlab.recipes`), ``summary.py`` (the table read into ``summary.json``),
``claims.py`` (the claims judged on the summary) and, where it draws, ``figures.py``. The
runner discovers the packages; a module directly in this folder is the shared part of a
family of experiments (``dit_common``: the summaries and figures of the DiT pair).

The package exports no names of its own; each experiment package is reachable as an
attribute (``actlab.experiments.signal``), imported on first use.
"""

from __future__ import annotations

from actlab._lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {})
