"""The run directory ``runs/<experiment>/<name>/`` and its files.

Layout::

    config.json      experiment, scale, seeds, overrides, grid and the full config(s)
    env.json         package versions, torch threads, device, git commit, command line
    units/<id>.json  one record per finished unit (status, rows, data, error), written atomically
    metrics.csv      the tidy table (run, seed, step, layer, metric, value), rows sorted by plan
    metrics.parquet  the same table when pyarrow is installed
    summary.json     the experiment's headline numbers
    claims.json      the experiment's claims about that summary (for reports and the index)
    seed_summaries.json  every seed's summary alone (the claims' samples; re-judged from it)
    figures/*.png    figures (``figures/<grid point>/*.png`` in sweeps)
    report.html      the self-contained report
    work/<id>/       scratch space of a running unit (removed when empty)
"""

from __future__ import annotations

import csv
import io
import shutil
from pathlib import Path
from typing import Any

from actlab.runner.atomic import TMP_SUFFIX, atomic_write_bytes, atomic_write_json, read_json
from actlab.runner.experiment import METRIC_COLUMNS, STATUS_DIVERGED, STATUS_OK

FINISHED = (STATUS_OK, STATUS_DIVERGED)


class RunDir:
    """Paths and atomic reads/writes of one run directory."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    # paths
    @property
    def units_dir(self) -> Path:
        """Folder of per-unit records."""
        return self.path / "units"

    @property
    def figures_dir(self) -> Path:
        """Folder of figures."""
        return self.path / "figures"

    @property
    def work_dir(self) -> Path:
        """Folder of per-unit scratch space."""
        return self.path / "work"

    def file(self, name: str) -> Path:
        """Path of a top-level file of the run (``config.json`` ...)."""
        return self.path / name

    def unit_path(self, unit_id: str) -> Path:
        """Path of the record of unit ``unit_id``."""
        return self.units_dir / f"{unit_id}.json"

    # life cycle
    def prepare(self, resume: bool) -> None:
        """Create the folder; without ``resume`` drop results of an earlier run of this name."""
        self.path.mkdir(parents=True, exist_ok=True)
        if not resume:
            for folder in (self.units_dir, self.figures_dir, self.work_dir):
                shutil.rmtree(folder, ignore_errors=True)
            for name in (
                "metrics.csv", "metrics.parquet", "summary.json", "claims.json", "status.json",
                "report.html", "seed_summaries.json",
            ):
                self.file(name).unlink(missing_ok=True)
        for stale in self.path.rglob(f"*{TMP_SUFFIX}"):  # left by a killed writer
            stale.unlink(missing_ok=True)
        self.units_dir.mkdir(exist_ok=True)

    # unit records
    def save_unit(self, record: dict[str, Any]) -> Path:
        """Save one unit record atomically."""
        return atomic_write_json(self.unit_path(record["id"]), record, indent=None)

    def load_unit(self, unit_id: str) -> dict[str, Any] | None:
        """The saved record of ``unit_id``, or None if absent or unreadable (then it reruns)."""
        path = self.unit_path(unit_id)
        try:
            record = read_json(path)
        except (OSError, ValueError):
            return None
        if not isinstance(record, dict) or record.get("id") != unit_id or "status" not in record:
            return None
        return record

    def finished_units(self) -> list[str]:
        """Ids of the units whose records say they finished (ok or diverged)."""
        if not self.units_dir.is_dir():
            return []
        return [path.stem for path in sorted(self.units_dir.glob("*.json"))
                if self.finished_unit(path.stem) is not None]

    def finished_unit(self, unit_id: str) -> dict[str, Any] | None:
        """The record of ``unit_id`` if it finished (ok or diverged); failed units rerun."""
        record = self.load_unit(unit_id)
        return record if record is not None and record["status"] in FINISHED else None

    # tables
    def write_metrics(self, rows: list[list]) -> None:
        """Write ``metrics.csv`` (floats as ``repr``, byte-stable) and, if possible, Parquet."""
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(METRIC_COLUMNS)
        for run, seed, step, layer, metric, value in rows:
            writer.writerow([run, int(seed), int(step), layer, metric, repr(float(value))])
        atomic_write_bytes(self.file("metrics.csv"), buffer.getvalue().encode("utf-8"))
        self._write_parquet(rows)

    def _write_parquet(self, rows: list[list]) -> None:
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            return
        columns = list(zip(*rows)) if rows else [[] for _ in METRIC_COLUMNS]
        table = pa.table(
            {
                "run": pa.array(columns[0], pa.string()),
                "seed": pa.array(columns[1], pa.int64()),
                "step": pa.array(columns[2], pa.int64()),
                "layer": pa.array(columns[3], pa.string()),
                "metric": pa.array(columns[4], pa.string()),
                "value": pa.array([float(v) for v in columns[5]], pa.float64()),
            }
        )
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        atomic_write_bytes(self.file("metrics.parquet"), sink.getvalue().to_pybytes())

    def read_json(self, name: str, default: Any = None) -> Any:
        """A top-level JSON file of the run, or ``default`` when missing."""
        try:
            return read_json(self.file(name))
        except FileNotFoundError:
            return default

    def write_json(self, name: str, value: Any) -> None:
        """Write a top-level JSON file atomically."""
        atomic_write_json(self.file(name), value)


def table_frame(rows: list[list]):
    """The tidy table as a pandas DataFrame with fixed column dtypes."""
    import pandas as pd

    frame = pd.DataFrame(rows, columns=list(METRIC_COLUMNS))
    return frame.astype(
        {"run": str, "seed": "int64", "step": "int64", "layer": str, "metric": str, "value": "float64"}
    )


def sort_rows(records: list[dict[str, Any]]) -> list[list]:
    """Rows of all ``records`` (in plan order) sorted deterministically.

    Sorted by run, seed, step, layer and metric; ties keep plan order and then the
    order within the unit, so the result never depends on which unit finished first.
    """
    keyed = []
    for unit_index, record in enumerate(records):
        for row_index, row in enumerate(record.get("rows", [])):
            run, seed, step, layer, metric, _ = row
            keyed.append(((run, seed, step, layer, metric, unit_index, row_index), row))
    keyed.sort(key=lambda item: item[0])
    return [row for _, row in keyed]
