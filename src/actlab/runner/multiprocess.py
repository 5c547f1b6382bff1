"""Multi-process units: one unit of work run data-parallel under torchrun (``--nproc N``).

:func:`execute_multiprocess` writes the :class:`~actlab.runner.execute.UnitTask` to a
temporary folder and starts PyTorch's own launcher on it::

    python -m torch.distributed.run --standalone --nproc_per_node N \\
        -m actlab.runner.multiprocess TASK.json RECORD.json

Each of the N ranks (this module's :func:`main`) joins the process group
(:func:`actlab.train.distributed.init_distributed`: gloo on the CPU, NCCL on CUDA with rank
``r`` on ``cuda:r`` of the GPUs it sees) and runs the unit through
:func:`~actlab.runner.execute.execute_unit` with its :class:`DistInfo` as ``ctx.dist``. The
experiment's recipe shards every global batch by rank and merges what it measures across
ranks, so every rank ends with the same numbers; rank 0 writes the record. A rank whose unit
fails writes its own record and exits non-zero, which makes torchrun stop the others (a rank
waiting in a collective for a dead peer would otherwise wait for the timeout); the parent
then returns that failure. Nothing here launches or talks between processes itself: the
launcher, the rendezvous and the collectives are torch.distributed's.

Under Ray (:func:`actlab.runner.backends.run_ray`) each such unit is one Ray task asking for
N CPUs or N GPUs, so Ray places whole multi-process units on the cluster's nodes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from actlab.errors import ConfigError
from actlab.runner.atomic import atomic_write_json, dumps
from actlab.runner.execute import UnitTask, execute_unit, failed_record

RECORD_TAIL = 4000  # characters of the launcher's output kept in a failed record


def check_nproc(nproc: int, *, device: str = "cpu", backend: str = "local", workers: int = 1,
                experiment: Any = None) -> None:
    """Refuse a ``--nproc`` that cannot run, before any unit does: below 1, an experiment
    whose units do not train data-parallel (``Experiment.distributed``), one GPU named for
    several ranks, more local ranks than GPUs, or several local multi-GPU workers."""
    if nproc < 1:
        raise ConfigError("--nproc", f"must be >= 1, got {nproc}")
    if nproc == 1:
        return
    if experiment is not None and not experiment.distributed:
        from actlab.runner.experiment import list_experiments

        able = ", ".join(k for k, cls in list_experiments().items() if cls.distributed)
        raise ConfigError("--nproc", f"{experiment.name} does not run its units data-parallel "
                                     f"(those that do: {able}); drop --nproc")
    if device.startswith("cuda:"):
        raise ConfigError("--nproc", f"rank r of a unit uses cuda:r; give --device cuda, not "
                                     f"{device}")
    if device == "cuda" and backend == "local":
        import torch

        if nproc > torch.cuda.device_count():
            raise ConfigError("--nproc", f"{nproc} ranks need {nproc} GPUs, this machine has "
                                         f"{torch.cuda.device_count()}")
        if workers > 1:
            raise ConfigError("--workers", "several multi-GPU units would share the same GPUs "
                                           "here; use --workers 1, or --backend ray to place "
                                           "them across a cluster")


def torchrun_command(nproc: int, task_path: Path, record_path: Path) -> list[str]:
    """The launcher's command line for one unit on ``nproc`` local processes."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            "--nproc_per_node", str(nproc), "-m", "actlab.runner.multiprocess",
            str(task_path), str(record_path)]


def _environment(task: UnitTask) -> dict[str, str]:
    """The ranks' environment: this one, the threads each rank may use, and this process's
    import path (so experiments registered from elsewhere import in the ranks too)."""
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(task.threads or 1)
    paths = [p for p in sys.path if p]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env


def execute_multiprocess(task: UnitTask) -> dict[str, Any]:
    """Run ``task`` on ``task.nproc`` processes under torchrun and return rank 0's record
    (or the record of a rank that failed, or a failed record with the launcher's output)."""
    with tempfile.TemporaryDirectory(prefix="actlab-unit-") as folder:
        task_path, record_path = Path(folder) / "task.json", Path(folder) / "record.json"
        task_path.write_text(dumps(dataclasses.asdict(task)))
        proc = subprocess.run(torchrun_command(task.nproc, task_path, record_path),
                              env=_environment(task), capture_output=True, text=True)
        if proc.returncode == 0 and record_path.exists():
            return json.loads(record_path.read_text())
        for rank_record in sorted(Path(folder).glob("record.rank*.json")):
            return json.loads(rank_record.read_text())
        output = (proc.stdout + proc.stderr)[-RECORD_TAIL:]
        return failed_record(task, f"torchrun exited with {proc.returncode} before a rank "
                                   f"wrote the unit's record:\n{output}")


def main(argv: list[str] | None = None) -> int:
    """One rank of a multi-process unit: ``TASK.json RECORD.json`` (see the module docstring)."""
    from actlab.train.distributed import cleanup, init_distributed

    task_path, record_path = (argv if argv is not None else sys.argv[1:])[:2]
    fields = json.loads(Path(task_path).read_text())
    task = dataclasses.replace(UnitTask(**fields), nproc=1)
    device = "cuda" if task.device.startswith("cuda") else "cpu"
    info = init_distributed(device)
    try:
        record = execute_unit(task, dist=info)
        if record["status"] == "failed":
            atomic_write_json(Path(record_path).with_name(f"record.rank{info.rank}.json"), record)
            sys.stdout.flush()
            os._exit(1)  # torchrun then stops the ranks that wait for this one
        if info.is_main:
            atomic_write_json(record_path, record)
    finally:
        cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
