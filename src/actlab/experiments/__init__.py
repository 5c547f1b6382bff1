"""One package per built-in experiment, each registering an
:class:`actlab.runner.experiment.Experiment`.

A package holds ``__init__.py`` (the config, scales, units and ``run_unit`` calling a recipe
of :mod:`actlab.recipes`), ``summary.py`` (the table read into ``summary.json``),
``claims.py`` (the claims judged on the summary) and, where it draws, ``figures.py``. The
runner discovers the packages; no module lives directly in this folder.
"""
