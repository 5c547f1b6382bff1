"""Writers for the probe's tidy table: CSV, Parquet, JSONL, TensorBoard, MLflow and W&B.

CSV and JSONL need nothing extra. Parquet needs ``pyarrow`` (``actlab[parquet]``),
TensorBoard needs ``tensorboard`` (``actlab[tensorboard]``), MLflow needs ``mlflow-skinny``
or ``mlflow`` (``actlab[mlflow]``) and W&B needs ``wandb``; each is imported only when its
writer is used.

The streaming writers take a DataFrame with columns step, layer, metric, value and log one
scalar per row under the key :func:`tag` ``"actlab/<metric>/<layer>"`` (layer ``model`` for
model-wide values) at ``step``: the same key the Hugging Face and Lightning callbacks log.
Pass them as ``Probe(writers=...)`` (each recorded step is sent when it closes) or use
:meth:`actlab.probe.probe.Probe.write`, which sends each row once. A writer that also has
``write_histograms(df)`` (TensorBoard, W&B, JSONL) receives the probe's fixed-bin histograms
(``Probe(histograms=<bins>)``) as they are recorded, as a frame with columns step, layer,
kind, bin_left, bin_right, count, logged under ``actlab/preact_hist/<layer>`` (kind
``pre``) and ``actlab/act_hist/<layer>`` (kind ``post``).
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from actlab.probe.columns import COLUMNS

#: the first segment of every key the writers and the callbacks log
PREFIX = "actlab"
#: the histogram kinds of ``Probe.histograms()`` and the metric name each is logged as
HIST_METRICS = {"pre": "preact_hist", "post": "act_hist"}
HIST_COLUMNS = ["step", "layer", "kind", "bin_left", "bin_right", "count"]


def _check(df: pd.DataFrame) -> None:
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"table lacks columns {missing}; expected {COLUMNS}")


def write_csv(df: pd.DataFrame, path: str | os.PathLike) -> None:
    """Write the tidy table as CSV (no index)."""
    _check(df)
    df.to_csv(Path(path), index=False)


def write_parquet(df: pd.DataFrame, path: str | os.PathLike) -> None:
    """Write the tidy table as Parquet; raises ImportError naming the extra if pyarrow is missing."""
    _check(df)
    try:
        import pyarrow  # noqa: F401
    except ImportError as exc:
        raise ImportError("to_parquet needs pyarrow: pip install 'actlab[parquet]'") from exc
    df.to_parquet(Path(path), index=False)


def tag(layer: str, metric: str) -> str:
    """The key of one value in every writer and callback: ``actlab/<metric>/<layer>``."""
    return f"{PREFIX}/{metric}/{layer or 'model'}"


def histogram_groups(df: pd.DataFrame) -> list[tuple[int, str, np.ndarray, np.ndarray]]:
    """``(step, key, edges, counts)`` of each histogram in a ``Probe.histograms()`` frame."""
    missing = [c for c in HIST_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"histogram frame lacks columns {missing}; expected {HIST_COLUMNS}")
    out = []
    for (step, layer, kind), group in df.groupby(["step", "layer", "kind"], sort=False):
        edges = np.append(group["bin_left"].to_numpy(float), group["bin_right"].to_numpy(float)[-1])
        out.append((int(step), tag(str(layer), HIST_METRICS.get(kind, f"{kind}_hist")), edges,
                    group["count"].to_numpy(float)))
    return out


def _rows(df: pd.DataFrame) -> list[tuple[int, str, str, float]]:
    _check(df)
    return [(int(s), str(layer), str(m), float(v))
            for s, layer, m, v in df[COLUMNS].itertuples(index=False, name=None)]


class TensorBoardWriter:
    """Log probe rows as TensorBoard scalars (``torch.utils.tensorboard.SummaryWriter``).

    Pass a log directory or an existing ``SummaryWriter``; :meth:`close` closes only a writer
    this object created.
    """

    def __init__(self, log_dir: str | os.PathLike | Any) -> None:
        if isinstance(log_dir, (str, os.PathLike)):
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as exc:
                raise ImportError("TensorBoardWriter needs tensorboard: "
                                  "pip install 'actlab[tensorboard]'") from exc
            self.writer = SummaryWriter(log_dir=str(log_dir))
            self._owned = True
        else:
            self.writer = log_dir
            self._owned = False

    def write(self, df: pd.DataFrame) -> None:
        """Add one scalar per row and flush."""
        for step, layer, metric, value in _rows(df):
            self.writer.add_scalar(tag(layer, metric), value, step)
        self.writer.flush()

    def write_histograms(self, df: pd.DataFrame) -> None:
        """Add each histogram with its fixed bins (``add_histogram_raw``). TensorBoard also
        wants the values' sum and sum of squares, which bin counts do not hold: they are
        taken at the bin centres (the counts and edges are exact)."""
        for step, key, edges, counts in histogram_groups(df):
            centres = (edges[:-1] + edges[1:]) / 2
            nonzero = np.flatnonzero(counts)
            low = float(edges[nonzero[0]]) if nonzero.size else float(edges[0])
            high = float(edges[nonzero[-1] + 1]) if nonzero.size else float(edges[-1])
            self.writer.add_histogram_raw(
                key, min=low, max=high, num=int(counts.sum()),
                sum=float(counts @ centres), sum_squares=float(counts @ centres**2),
                bucket_limits=edges[1:].tolist(), bucket_counts=counts.tolist(),
                global_step=step)
        self.writer.flush()

    def close(self) -> None:
        """Close the underlying SummaryWriter if this object created it."""
        if self._owned:
            self.writer.close()


class MLflowWriter:
    """Log probe rows as MLflow metrics of one run, in batches of up to 1000.

    ``run_id`` defaults to the active run (``mlflow.active_run()``); ``tracking_uri`` defaults
    to MLflow's own configuration.
    """

    def __init__(self, run_id: str | None = None, tracking_uri: str | None = None) -> None:
        try:
            import mlflow
            from mlflow.tracking import MlflowClient
        except ImportError as exc:
            raise ImportError("MLflowWriter needs mlflow: pip install 'actlab[mlflow]'") from exc
        if run_id is None:
            run = mlflow.active_run()
            if run is None:
                raise ValueError("MLflowWriter: no run_id given and no active MLflow run")
            run_id = run.info.run_id
        self.run_id = run_id
        self.client = MlflowClient(tracking_uri=tracking_uri)

    def write(self, df: pd.DataFrame) -> None:
        """Log one metric value per row."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(tag(layer, metric), value, now, step)
                   for step, layer, metric, value in _rows(df)]
        for start in range(0, len(metrics), 1000):
            self.client.log_batch(self.run_id, metrics=metrics[start:start + 1000])


class WandbWriter:
    """Log probe rows to a Weights & Biases run, one ``run.log`` per recorded step.

    Values are logged under :func:`tag` keys against their own x-axis ``actlab/step`` (the
    probe's 0-based step; ``run.define_metric("actlab/*", step_metric="actlab/step")``), so
    they never move or clash with the run's own step counter (e.g. the HF Trainer's W&B
    reporting). Histograms are ``wandb.Histogram`` with the probe's fixed bins. Pass a run
    or use the active one (``wandb.run``).
    """

    STEP = f"{PREFIX}/step"

    def __init__(self, run: Any = None) -> None:
        try:
            import wandb
        except ImportError as exc:
            raise ImportError("WandbWriter needs wandb: pip install wandb") from exc
        self._wandb = wandb
        if run is None:
            run = wandb.run
            if run is None:
                raise ValueError("WandbWriter: no run given and no active W&B run (wandb.init())")
        self.run = run
        run.define_metric(self.STEP)
        run.define_metric(f"{PREFIX}/*", step_metric=self.STEP)

    def _log(self, by_step: dict[int, dict[str, Any]]) -> None:
        for step in sorted(by_step):
            self.run.log({self.STEP: step, **by_step[step]})

    def write(self, df: pd.DataFrame) -> None:
        """One ``run.log`` per step of the rows."""
        by_step: dict[int, dict[str, Any]] = {}
        for step, layer, metric, value in _rows(df):
            by_step.setdefault(step, {})[tag(layer, metric)] = value
        self._log(by_step)

    def write_histograms(self, df: pd.DataFrame) -> None:
        """Each histogram as a ``wandb.Histogram`` with the probe's bin edges and counts."""
        by_step: dict[int, dict[str, Any]] = {}
        for step, key, edges, counts in histogram_groups(df):
            by_step.setdefault(step, {})[key] = self._wandb.Histogram(
                np_histogram=(counts, edges))
        self._log(by_step)


def _json_value(value: float) -> float | str:
    # strict JSON has no NaN or infinity: those are written as the strings below
    return value if math.isfinite(value) else str(value)  # "nan", "inf", "-inf"


class JsonlWriter:
    """Append probe rows to a JSON Lines file, one object per row:
    ``{"step", "layer", "metric", "key", "value"}`` with ``key`` = :func:`tag`; a
    non-finite value is the string ``"nan"``, ``"inf"`` or ``"-inf"`` (strict JSON has no
    NaN). Histograms are one object per histogram: ``{"step", "layer", "metric", "key",
    "bin_edges", "counts"}``. Each write appends and flushes, so the file can be read while
    the run goes on; :func:`read_jsonl` reads it back.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = self.path.open("a", encoding="utf-8")

    def _emit(self, records: list[dict[str, Any]]) -> None:
        self._fh.writelines(json.dumps(r, allow_nan=False) + "\n" for r in records)
        self._fh.flush()

    def write(self, df: pd.DataFrame) -> None:
        """Append one line per row."""
        self._emit([{"step": step, "layer": layer, "metric": metric, "key": tag(layer, metric),
                     "value": _json_value(value)} for step, layer, metric, value in _rows(df)])

    def write_histograms(self, df: pd.DataFrame) -> None:
        """Append one line per histogram (bin edges and counts)."""
        records = []
        for step, key, edges, counts in histogram_groups(df):
            _, metric, layer = key.split("/", 2)
            records.append({"step": step, "layer": layer, "metric": metric, "key": key,
                            "bin_edges": edges.tolist(), "counts": counts.tolist()})
        self._emit(records)

    def close(self) -> None:
        """Close the file."""
        self._fh.close()


def read_jsonl(path: str | os.PathLike) -> pd.DataFrame:
    """The scalar rows of a :class:`JsonlWriter` file as the tidy table (histograms
    skipped; non-finite values restored)."""
    rows = []
    with Path(path).open(encoding="utf-8") as fh:
        for line in fh:
            record = json.loads(line)
            if "value" in record:
                rows.append((record["step"], record["layer"], record["metric"],
                             float(record["value"])))
    return pd.DataFrame(rows, columns=COLUMNS).astype({"step": "int64", "value": "float64"})
