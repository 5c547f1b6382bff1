"""Optional metric sinks beside the run directory: TensorBoard and MLflow.

Each sink receives every unit record as it is saved and the summary at the end. Tags
are ``<run>/<layer>/<metric>/seed<seed>`` (layer omitted when empty).
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any

from actlab.errors import ConfigError


def metric_tag(run: str, seed: int, layer: str, metric: str) -> str:
    """The tag a tidy row is logged under."""
    parts = [run, layer, metric, f"seed{seed}"]
    return "/".join(p for p in parts if p)


class Sink:
    """Interface of a metric sink."""

    def start(self, experiment: str, name: str, params: dict[str, Any]) -> None:
        """Called once before any unit."""

    def unit(self, record: dict[str, Any], run_prefix: str) -> None:
        """Called with each saved unit record."""

    def finish(self, summary: dict[str, Any] | None) -> None:
        """Called once at the end."""


class TensorBoardSink(Sink):
    """Scalars in ``DIR/<experiment>/<name>`` via ``torch.utils.tensorboard``."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.writer = None

    def start(self, experiment: str, name: str, params: dict[str, Any]) -> None:  # noqa: D102
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:
            raise ConfigError("--tensorboard", f"tensorboard is not installed ({exc})") from None
        self.writer = SummaryWriter(log_dir=str(self.root / experiment / name))
        self.writer.add_text("config", "\n".join(f"{k} = {v}" for k, v in params.items()))

    def unit(self, record: dict[str, Any], run_prefix: str) -> None:  # noqa: D102
        for run, seed, step, layer, metric, value in record["rows"]:
            if math.isfinite(value):
                self.writer.add_scalar(metric_tag(run_prefix + run, seed, layer, metric), value, step)

    def finish(self, summary: dict[str, Any] | None) -> None:  # noqa: D102
        if self.writer is not None:
            self.writer.flush()
            self.writer.close()


def _mlflow_uri(uri: str) -> str:
    """A plain path becomes a ``file:`` URI (MLflow's local file store)."""
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", uri) and not re.match(r"^[A-Za-z]:[\\/]", uri):
        return uri
    return Path(uri).resolve().as_uri()


class MlflowSink(Sink):
    """One MLflow run per actlab run; params from the config, metrics batched per unit.

    MLflow 3 put the local file store in maintenance mode and refuses it unless
    ``MLFLOW_ALLOW_FILE_STORE=true``; for ``file:`` URIs (or plain paths) this sink sets
    that variable so the embedded default works without a database.
    """

    _KEY = re.compile(r"[^\w\-. /]")

    def __init__(self, uri: str) -> None:
        self.uri = _mlflow_uri(uri)
        self.client = None
        self.run_id: str | None = None

    def start(self, experiment: str, name: str, params: dict[str, Any]) -> None:  # noqa: D102
        if self.uri.startswith("file:"):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        try:
            from mlflow.entities import Param
            from mlflow.tracking import MlflowClient
        except ImportError as exc:
            raise ConfigError("--mlflow", f"mlflow is not installed ({exc})") from None
        self.client = MlflowClient(tracking_uri=self.uri)
        found = self.client.get_experiment_by_name(experiment)
        experiment_id = found.experiment_id if found else self.client.create_experiment(experiment)
        self.run_id = self.client.create_run(experiment_id, run_name=name).info.run_id
        items = [Param(self._key(k), str(v)[:500]) for k, v in params.items()]
        for i in range(0, len(items), 100):
            self.client.log_batch(self.run_id, params=items[i : i + 100])

    def _key(self, text: str) -> str:
        return self._KEY.sub("_", text)[:250]

    def unit(self, record: dict[str, Any], run_prefix: str) -> None:  # noqa: D102
        from mlflow.entities import Metric

        metrics = [
            Metric(self._key(metric_tag(run_prefix + run, seed, layer, metric)), value, 0, step)
            for run, seed, step, layer, metric, value in record["rows"]
            if math.isfinite(value)
        ]
        for i in range(0, len(metrics), 1000):
            self.client.log_batch(self.run_id, metrics=metrics[i : i + 1000])

    def finish(self, summary: dict[str, Any] | None) -> None:  # noqa: D102
        if self.client is None or self.run_id is None:
            return
        if summary:
            from mlflow.entities import Metric

            flat = {k: v for k, v in flatten(summary).items() if isinstance(v, (int, float))}
            metrics = [
                Metric(self._key(f"summary/{k}"), float(v), 0, 0)
                for k, v in flat.items()
                if not isinstance(v, bool) and math.isfinite(float(v))
            ]
            for i in range(0, len(metrics), 1000):
                self.client.log_batch(self.run_id, metrics=metrics[i : i + 1000])
        self.client.set_terminated(self.run_id)


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as ``{"a/b/c": leaf}`` (lists of scalars kept as leaves)."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(flatten(item, f"{prefix}/{key}" if prefix else str(key)))
        return out
    return {prefix or "value": value}
