"""Running one unit of work, in this process, a pool worker or a Ray task.

:func:`execute_unit` never raises for a problem of the experiment: an exception becomes a
``failed`` record with its traceback, and a non-finite value of any recorded metric turns an
``ok`` result into ``diverged`` (the metric, step, run and seed named). The record is a plain
dict that the parent saves as ``units/<id>.json``.
"""

from __future__ import annotations

import importlib
import math
import shutil
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from actlab.runner.atomic import to_jsonable
from actlab.runner.experiment import (
    STATUS_DIVERGED,
    STATUS_FAILED,
    STATUS_OK,
    UnitContext,
    UnitResult,
)

VALID_STATUSES = (STATUS_OK, STATUS_DIVERGED, STATUS_FAILED)


@dataclass
class UnitTask:
    """Everything a worker needs to run one unit; picklable, no live objects."""

    experiment: str
    module: str  # module that registers the experiment (imported in the worker)
    module_root: str | None  # sys.path entry to add if ``module`` is not importable as is
    config: dict[str, Any]
    point: dict[str, str]
    unit: dict[str, Any]
    seeds: list[int]
    unit_id: str
    workdir: str
    device: str = "cpu"
    threads: int | None = None  # torch threads to set in the worker (None: leave as is)
    quiet: bool = True  # no progress bars inside the unit
    extra: dict[str, Any] = field(default_factory=dict)
    nproc: int = 1  # > 1: the unit runs data-parallel under torchrun (actlab.runner.multiprocess)


def module_root(module_name: str) -> str | None:
    """The ``sys.path`` entry from which ``module_name`` was imported (None if unknown)."""
    module = sys.modules.get(module_name)
    file = getattr(module, "__file__", None)
    if not file:
        return None
    root = Path(file).resolve().parent
    depth = module_name.count(".")
    if Path(file).name == "__init__.py":
        depth += 1
    for _ in range(depth):
        root = root.parent
    return str(root)


def _import_experiment_module(task: UnitTask) -> None:
    try:
        importlib.import_module(task.module)
    except ModuleNotFoundError:
        if not task.module_root or task.module_root in sys.path:
            raise
        sys.path.insert(0, task.module_root)
        importlib.import_module(task.module)


def _progress(quiet: bool):
    if quiet or not sys.stderr.isatty():
        return lambda it, **_: it
    from tqdm.auto import tqdm

    return lambda it, **kw: tqdm(it, leave=False, **kw)


def first_non_finite(rows: list[list]) -> str | None:
    """Where the first non-finite value of ``rows`` (normalised rows) was recorded, e.g.
    ``"cost is nan at step 12 (relu-lr4, seed 0)"``; None when every value is finite."""
    for run, seed, step, layer, metric, value in rows:
        if not math.isfinite(value):
            where = f"{run}, seed {seed}" + (f", layer {layer}" if layer else "")
            return f"{metric} is {value} at step {step} ({where})"
    return None


def _normalise_rows(rows: list, seeds: list[int]) -> list[list]:
    """Rows as JSON lists with the column types of the tidy table."""
    out = []
    for row in rows:
        if len(row) != 6:
            raise ValueError(f"a metrics row needs 6 fields (run, seed, step, layer, metric, value), got {row!r}")
        run, seed, step, layer, metric, value = row
        out.append([str(run), int(seed), int(step), str(layer), str(metric), float(value)])
    return out


def execute_unit(task: UnitTask, config: Any = None, dist: Any = None) -> dict[str, Any]:
    """Run ``task`` and return its record: id, point, unit, seeds, status, error, rows, data.

    ``config`` is the config object when running in the parent process; workers rebuild it
    from ``task.config`` (a JSON dict) with ``build_config``. A task with ``nproc > 1`` runs
    under torchrun (:func:`actlab.runner.multiprocess.execute_multiprocess`, which the
    backends call for it); each of its ranks calls this with its ``dist``
    (:class:`~actlab.train.distributed.DistInfo`), which reaches the unit as ``ctx.dist`` and
    places it on the rank's device.
    """
    started = time.perf_counter()
    record: dict[str, Any] = {
        "id": task.unit_id,
        "point": task.point,
        "unit": task.unit,
        "seeds": list(task.seeds),
        "status": STATUS_FAILED,
        "error": None,
        "rows": [],
        "data": {},
    }
    workdir = Path(task.workdir)
    try:
        import torch

        from actlab.device import use_strict_float32

        if task.threads:
            torch.set_num_threads(task.threads)
        use_strict_float32()  # TF32 off; bf16 only where a config asks for it
        _import_experiment_module(task)
        from actlab.device import on_device
        from actlab.runner.config import build_config
        from actlab.runner.experiment import get_experiment

        experiment = get_experiment(task.experiment)
        if config is None:
            config = build_config(experiment.Config, task.config)
        workdir.mkdir(parents=True, exist_ok=True)
        ctx = UnitContext(workdir=workdir, device=torch.device(task.device), progress=_progress(task.quiet))
        if dist is not None:
            ctx.dist, ctx.device = dist, dist.device
        if experiment.host_only:
            ctx.device = torch.device("cpu")
        with on_device(ctx.device):  # the engine and data modules place everything here
            result = experiment.run_unit(config, dict(task.unit), list(task.seeds), ctx)
        if not isinstance(result, UnitResult):
            raise TypeError(f"run_unit must return a UnitResult, got {type(result).__name__}")
        if result.status not in VALID_STATUSES:
            raise ValueError(f"unknown unit status {result.status!r} (valid: {', '.join(VALID_STATUSES)})")
        record["rows"] = _normalise_rows(result.rows, task.seeds)
        record["data"] = to_jsonable(result.data)
        record["status"] = result.status
        record["error"] = result.error
        non_finite = first_non_finite(record["rows"])
        if result.status == STATUS_OK and non_finite:  # whatever the metric is called
            record["status"] = STATUS_DIVERGED
            record["error"] = f"diverged: {non_finite}"
    except BaseException as exc:  # noqa: BLE001 - a failing unit is data, not a crash
        if isinstance(exc, KeyboardInterrupt):
            raise
        record["status"] = STATUS_FAILED
        record["error"] = "".join(traceback.format_exception(exc)).rstrip()
    finally:
        if workdir.exists() and not any(workdir.iterdir()):
            shutil.rmtree(workdir, ignore_errors=True)
    record["elapsed_s"] = round(time.perf_counter() - started, 3)
    if dist is not None:
        record["world_size"] = dist.world_size  # the processes the unit ran on (--nproc)
    return record


def failed_record(task: UnitTask, error: str) -> dict[str, Any]:
    """The record of a unit whose worker died before returning (crash, lost Ray node)."""
    return {"id": task.unit_id, "point": task.point, "unit": task.unit, "seeds": list(task.seeds),
            "status": STATUS_FAILED, "error": error, "rows": [], "data": {}}


def error_headline(error: str | None) -> str:
    """The last line of a traceback (``RuntimeError: boom``), for one-line summaries."""
    if not error:
        return ""
    lines = [line for line in error.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""
