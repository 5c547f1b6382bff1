"""Shared fixtures and the suite's parallel set-up.

Helper modules beside the tests (``_toy_experiments``, ``_inline_run``, ``_meta_harness``,
``_corpus``) are importable by name: ``pythonpath = ["tests"]`` in ``pyproject.toml`` puts this
folder on ``sys.path``.

Under pytest-xdist (``make test``: ``-n auto --dist loadgroup``):

* each worker runs torch on its share of the cores (``cores // workers`` threads, set before
  any test, and inherited by the processes a test starts through ``OMP_NUM_THREADS``), so
  two workers never run two threads each on two cores (OpenMP spin-waiting makes that many
  times slower than one thread each);
* tests that start processes or pools of their own (gloo ranks, process pools, among them
  the CLI's ``run``, ``sweep`` and ``reproduce``, which pool every core by default, Ray,
  ``actlab`` subprocesses, torch.compile's compile workers) carry
  ``pytest.mark.xdist_group("processes")``: one worker runs them one after another, so they
  neither oversubscribe the cores together nor race each other for ports;
* the tests of a module that computes a module-scoped fixture (one expensive run read by
  several tests) stay on one worker, so the fixture is computed once, not once per worker.
"""

from __future__ import annotations

import os

import pytest


def _cores() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def pytest_configure(config: pytest.Config) -> None:
    """On an xdist worker, give torch ``cores // workers`` threads (at least one)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if "PYTEST_XDIST_WORKER" not in os.environ or workers < 2:
        return
    threads = max(1, _cores() // workers)
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


def _uses_module_fixture(item: pytest.Item) -> bool:
    """Whether ``item`` requests a fixture shared by a module (or class) of tests."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(defs[-1].scope in ("module", "class", "package")
               for defs in info.name2fixturedefs.values() if defs)


def _group_of(item: pytest.Item) -> str:
    """The xdist group of ``item`` as ``--dist loadgroup`` names it ('' for none)."""
    names = {str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
             for mark in item.iter_markers("xdist_group")}
    return "_".join(sorted(names))


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]):
    """Keep each module that shares a module-scoped fixture on one xdist worker (before
    xdist reads the groups), and make ``--dist loadgroup`` see the groups (after it).

    xdist 3.8 tells its scheduler a test's group by appending ``@group`` to the test's id
    through ``item._nodeid``, which pytest 9.2 no longer reads (pytest-dev/pytest-xdist#1386),
    so the groups would be silently ignored. Where that suffix is missing, it is set on the
    structured id instead; where xdist set it (older pytest, a fixed xdist), nothing changes.
    """
    for item in items:
        if item.get_closest_marker("xdist_group") is None and _uses_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
    result = yield
    if getattr(config.option, "loadgroup", False):  # set by xdist on its workers
        for item in items:
            group = _group_of(item)
            if group and not item.nodeid.endswith(f"@{group}") and hasattr(item, "_id"):
                from _pytest.nodeid import NodeId

                item._id = NodeId.parse(f"{item.nodeid}@{group}")
    return result


@pytest.fixture
def one_thread():
    """Run the test on one torch thread (tiny models gain nothing from intra-op threads, and
    on a loaded machine OpenMP spin-waiting makes them far slower); the caller's setting is
    restored afterwards."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
