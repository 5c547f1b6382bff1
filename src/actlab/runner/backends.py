"""Execution backends: in-process, a local process pool, or Ray tasks.

Every backend takes the same :class:`~actlab.runner.execute.UnitTask` list and calls
``on_done(record)`` in the parent as each unit finishes, so the parent (the only writer
of the run directory) saves it at once. Results do not depend on the backend: the table
is assembled afterwards in plan order.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import replace
from typing import Any

from actlab.errors import ConfigError
from actlab.runner.execute import UnitTask, execute_unit, failed_record
from actlab.runner.multiprocess import execute_multiprocess

BACKENDS = ("local", "ray")
OnDone = Callable[[dict[str, Any]], None]


def execute_task(task: UnitTask, config: Any = None) -> dict[str, Any]:
    """The record of ``task``: run here (:func:`~actlab.runner.execute.execute_unit`), or on
    ``task.nproc`` processes under torchrun when it asks for several
    (:func:`~actlab.runner.multiprocess.execute_multiprocess`)."""
    if task.nproc > 1:
        return execute_multiprocess(task)
    return execute_unit(task, config)


def threads_per_worker(workers: int) -> int:
    """Torch threads for each of ``workers`` processes: ``max(1, cores // workers)``."""
    return max(1, (os.cpu_count() or 1) // max(1, workers))


def _exit_with_parent(parent: int, interval_s: float = 1.0) -> None:
    """Exit this worker once its parent is gone (a SIGKILLed parent would leave it orphaned)."""
    while True:
        time.sleep(interval_s)
        if os.getppid() != parent:
            os._exit(1)


def _init_worker(threads: int, sys_path: list[str], parent: int) -> None:
    threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()
    for entry in reversed(sys_path):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    import torch

    torch.set_num_threads(threads)


def _result_or_failure(get: Callable[[], dict[str, Any]], task: UnitTask) -> dict[str, Any]:
    """The unit's record, or a failed record when its worker died (crash, lost Ray node)."""
    try:
        return get()
    except Exception as exc:  # noqa: BLE001 - a dead worker fails its unit, not the sweep
        return failed_record(task, "".join(traceback.format_exception(exc)).rstrip())


def run_local(
    tasks: Sequence[UnitTask], on_done: OnDone, workers: int = 1, configs: Sequence[Any] | None = None
) -> None:
    """Run tasks in this process (``workers == 1``) or a spawn-context process pool.

    ``configs`` (one config object per task) is used in-process; pool workers rebuild the
    config from the task's JSON dict.
    """
    run_indexed(tasks, lambda _, record: on_done(record), workers, configs)


def run_indexed(
    tasks: Sequence[UnitTask],
    on_done: Callable[[int, dict[str, Any]], None],
    workers: int = 1,
    configs: Sequence[Any] | None = None,
) -> None:
    """:func:`run_local`, calling ``on_done(i, record)`` with the position ``i`` of the task.

    Unit ids are unique within one run only (two experiments can plan the same id), so a
    caller that mixes the units of several runs tells them apart by position. The pool
    starts units in list order as workers free up: a list sorted longest first is
    scheduled longest-processing-time-first.
    """
    if workers < 1:
        raise ConfigError("--workers", f"must be >= 1, got {workers}")
    if not tasks:
        return
    if workers == 1:
        import torch

        previous = torch.get_num_threads()  # units pin their own; give the caller its own back
        try:
            for i, task in enumerate(tasks):
                on_done(i, execute_task(task, configs[i] if configs is not None else None))
        finally:
            torch.set_num_threads(previous)
        return
    threads = threads_per_worker(workers)
    queue = deque(range(len(tasks)))
    while queue:
        suspects = _run_pool(tasks, queue, on_done, min(workers, len(queue)), threads)
        # A dead worker breaks the whole pool: every unit in flight then fails alike. Run
        # each of them alone, so only the one that kills its worker is recorded failed.
        for i in suspects:
            with _pool(1, threads) as alone:
                on_done(i, _result_or_failure(alone.submit(execute_task, tasks[i]).result, tasks[i]))


def _pool(workers: int, threads: int) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(
        max_workers=workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_init_worker,
        initargs=(threads, list(sys.path), os.getpid()),
    )


def _run_pool(tasks: Sequence[UnitTask], queue: deque[int], on_done: Callable[[int, dict[str, Any]], None],
              workers: int, threads: int) -> list[int]:
    """Feed ``queue`` (task positions) to one pool, at most ``workers`` units in flight, in
    queue order; return the units in flight when a worker died (the pool is then spent)."""
    with _pool(workers, threads) as pool:
        in_flight: dict[Future, int] = {}
        while queue or in_flight:
            while queue and len(in_flight) < workers:
                i = queue.popleft()
                try:
                    in_flight[pool.submit(execute_task, tasks[i])] = i
                except BrokenProcessPool:  # a worker died since the last wait: i never ran
                    queue.appendleft(i)
                    return sorted(in_flight.values())
            done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
            for future in sorted(done, key=in_flight.__getitem__):
                if isinstance(future.exception(), BrokenProcessPool):
                    return sorted(in_flight.values())
                i = in_flight.pop(future)
                on_done(i, _result_or_failure(future.result, tasks[i]))
    return []


def ray_resources(device: str, nproc: int = 1) -> dict[str, float]:
    """What one Ray task asks for: a CPU, and a whole GPU when the unit runs on CUDA; a
    unit of ``nproc`` processes (``--nproc``) asks for ``nproc`` of them.

    Ray then places at most one unit per GPU (``nproc`` GPUs of one node for a
    multi-process unit, whose torchrun ranks use them as ``cuda:0`` .. ``cuda:nproc-1``) and
    sets ``CUDA_VISIBLE_DEVICES`` for it, so ``cuda`` inside the task is what Ray gave it.
    """
    if device.startswith("cuda"):
        return {"num_cpus": max(1, nproc), "num_gpus": max(1, nproc)}
    return {"num_cpus": max(1, nproc)}


def run_ray(
    tasks: Sequence[UnitTask], on_done: OnDone, address: str | None = None, workers: int | None = None
) -> None:
    """Submit tasks as Ray tasks to ``ray.init(address=...)`` (a local instance when None).

    If Ray is already initialised (e.g. by the caller), that instance is used and left
    running; otherwise this starts one and shuts it down at the end.
    """
    try:
        import ray
    except ImportError as exc:  # the optional extra is missing
        raise ConfigError("--backend", f"ray is not installed ({exc}); pip install 'actlab[ray]'") from None
    if not tasks:
        return
    started_here = False
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
        if address:
            kwargs["address"] = address
        elif workers:
            kwargs["num_cpus"] = workers
        ray.init(**kwargs)
        started_here = True
    try:
        remote = ray.remote(max_retries=0, **ray_resources(tasks[0].device, tasks[0].nproc))(
            execute_task)
        # Ray hides every GPU but the one it assigned, which is then "cuda" (index 0).
        tasks = [replace(t, device="cuda") if t.device.startswith("cuda") else t for t in tasks]
        refs = {remote.remote(task): task for task in tasks}
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                on_done(_result_or_failure(lambda ref=ref: ray.get(ref), refs[ref]))
    finally:
        if started_here:
            ray.shutdown()
