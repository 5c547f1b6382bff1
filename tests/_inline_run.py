"""Run an experiment's units in this process, without a run directory (for experiment tests)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from actlab.runner.experiment import METRIC_COLUMNS, Experiment, RunContext, UnitContext


def run_inline(exp: Experiment, config: Any, tmp_path: Path,
               seed_groups: Iterable[Sequence[int]] = ((0,),)
               ) -> tuple[dict, pd.DataFrame, list[dict[str, Any]]]:
    """Every unit once per seed group, then ``summarize``: ``(summary, table, results)``.

    ``results`` are the records the runner would hand to ``summarize`` (unit, seeds, status,
    error, data); figures go to ``tmp_path / "figures"``.
    """
    rows, results = [], []
    for unit in exp.units(config):
        for seeds in seed_groups:
            res = exp.run_unit(config, unit, list(seeds), UnitContext(workdir=tmp_path))
            rows += res.rows
            results.append({"unit": unit, "seeds": list(seeds), "status": res.status,
                            "error": res.error, "data": res.data})
    table = pd.DataFrame(rows, columns=list(METRIC_COLUMNS))
    summary = exp.summarize(config, table, results,
                            RunContext(out_dir=tmp_path, figures_dir=tmp_path / "figures"))
    return summary, table, results
