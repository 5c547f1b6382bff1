"""Writers for the probe's tidy table: CSV, Parquet, TensorBoard and MLflow.

CSV needs nothing extra. Parquet needs ``pyarrow`` (``actlab[parquet]``), TensorBoard needs
``tensorboard`` (``actlab[tensorboard]``) and MLflow needs ``mlflow-skinny`` or ``mlflow``
(``actlab[mlflow]``); each is imported only when its writer is used.

The streaming writers take a DataFrame with columns step, layer, metric, value and log one
scalar per row under the tag ``"<metric>/<layer>"`` at ``step``. Use them through
:meth:`actlab.probe.probe.Probe.write`, which sends each row once.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pandas as pd

from actlab.probe.columns import COLUMNS


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
    """The scalar name used by the streaming writers."""
    return f"{metric}/{layer or 'model'}"


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
        _check(df)
        for step, layer, metric, value in df[COLUMNS].itertuples(index=False, name=None):
            self.writer.add_scalar(tag(layer, metric), float(value), int(step))
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

        _check(df)
        now = int(time.time() * 1000)
        metrics = [Metric(tag(layer, metric), float(value), now, int(step))
                   for step, layer, metric, value in df[COLUMNS].itertuples(index=False, name=None)]
        for start in range(0, len(metrics), 1000):
            self.client.log_batch(self.run_id, metrics=metrics[start:start + 1000])
