"""``Probe`` on 2 gloo processes (DDP, FSDP2) equals one process seeing the global batch.

Each rank trains the same float64 MLP on its half of every batch; the reference is one
process training the same model on the whole batch (its loss the global mean, which DDP and
FSDP reproduce by averaging the ranks' gradients of their own mean losses). Every metric of
every layer, and every histogram, must agree to 1e-6 relative on every recorded step, and a
recorded step may use at most three collectives.
"""

from __future__ import annotations

import gc
import os
import pickle
import sys

import numpy as np
import pandas as pd
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from actlab.errors import ConfigError
from actlab.probe import Probe
from actlab.probe.collectors import Collector, available_metrics

WORLD, STEPS, BATCH = 2, 4, 12
BLOCKS, INPUTS = ["1", "5"], ["8"]
COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object",
               "broadcast", "reduce", "gather", "scatter", "reduce_scatter_tensor",
               "all_to_all", "barrier", "send", "recv")

pytestmark = [pytest.mark.skipif(not dist.is_available() or sys.platform == "win32",
                                 reason="needs torch.distributed with gloo"),
              pytest.mark.slow,
              pytest.mark.xdist_group("processes")]  # 2 ranks: one xdist worker runs these


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 10), nn.Tanh(), nn.Linear(10, 10), nn.ReLU(),
                         nn.Linear(10, 10), nn.GELU(), nn.Linear(10, 10), nn.Sigmoid(),
                         nn.Linear(10, 3)).double()


def _data() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(BATCH, 6, generator=g, dtype=torch.float64) * 2 + 0.5,
             torch.randn(BATCH, 3, generator=g, dtype=torch.float64)) for _ in range(STEPS)]


def _probe(model: nn.Module) -> Probe:
    return Probe(model, every=1, metrics=available_metrics(), blocks=BLOCKS, input_modules=INPUTS, histograms=6,
                 hist_range=(-2.0, 2.0))


def _train(model: nn.Module, probe: Probe, batches: list, on_step=None,
           zero_grad_first: bool = False) -> None:
    """SGD steps; ``zero_grad_first`` clears the gradients right after the update, before
    ``probe.step()`` (the order of the probe's first example), instead of at the next step."""
    opt = torch.optim.SGD(model.parameters(), lr=0.2)
    for x, y in batches:
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        if zero_grad_first:
            opt.zero_grad()
        if on_step is None:
            probe.step()
        else:
            on_step()


def _worker(rank: int, mode: str, init: str, out: str) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=WORLD)
    try:
        model = _model()
        zero_grad_first = mode.endswith("-zero-grad-first")
        mode = mode.removesuffix("-zero-grad-first")
        if mode == "ddp":
            model = nn.parallel.DistributedDataParallel(model)
        else:
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import fully_shard

            mesh = init_device_mesh("cpu", (WORLD,))
            for i in (0, 2, 4, 6, 8):
                fully_shard(model[i], mesh=mesh)
            fully_shard(model, mesh=mesh)
        probe = _probe(model)
        half = BATCH // WORLD
        mine = [(x[rank * half:(rank + 1) * half], y[rank * half:(rank + 1) * half])
                for x, y in _data()]

        counts: list[int] = []
        originals = {name: getattr(dist, name) for name in COLLECTIVES if hasattr(dist, name)}
        calls = [0]

        def counting(fn):
            def wrapped(*args, **kwargs):
                calls[0] += 1
                return fn(*args, **kwargs)
            return wrapped

        def counted_step() -> None:
            calls[0] = 0
            for name, fn in originals.items():
                setattr(dist, name, counting(fn))
            try:
                probe.step()
            finally:
                for name, fn in originals.items():
                    setattr(dist, name, fn)
            counts.append(calls[0])

        _train(model, probe, mine, counted_step, zero_grad_first)
        probe.close()
        refused = ""
        try:
            class Opaque(Collector):
                metrics = ("opaque_metric",)

                def observe(self, where, p, a):
                    return a.sum(), None

                def combine(self, where, raw, meta):
                    return {"opaque_metric": float(raw.sum())}

            from actlab.probe.collectors import register_metric, unregister_metric

            register_metric(Opaque())
            try:
                Probe(_model(), metrics=["opaque_metric"])
            finally:
                unregister_metric("opaque_metric")
        except ConfigError as exc:
            refused = str(exc)
        if rank == 0:
            with open(out, "wb") as fh:
                pickle.dump({"table": probe.table(), "hist": probe.histograms(),
                             "counts": counts, "refused": refused}, fh)
        probe = model = None  # drop the DDP wrapper (the closure sees the same cell)
        _release_ddp()
    finally:
        dist.destroy_process_group()


def _release_ddp() -> None:
    # Free DDP's reducer while the process group lives: if the reducer outlives
    # destroy_process_group, its dealloc (holding the GIL) runs the gloo group's destructor,
    # which joins a worker thread that waits for the GIL, and the rank hangs at exit.
    gc.collect()


def _run(mode: str, tmp_path) -> dict:
    out = str(tmp_path / f"{mode}.pkl")
    init = f"file://{tmp_path / f'{mode}.store'}"
    mp.spawn(_worker, args=(mode, init, out), nprocs=WORLD, join=True)
    with open(out, "rb") as fh:
        return pickle.load(fh)


@pytest.fixture(scope="module")
def reference() -> dict:
    torch.set_num_threads(1)
    model = _model()
    probe = _probe(model)
    _train(model, probe, _data())
    probe.close()
    return {"table": probe.table(), "hist": probe.histograms()}


def _assert_same(got: pd.DataFrame, want: pd.DataFrame, keys: list[str], value: str) -> None:
    merged = want.merge(got, on=keys, how="outer", suffixes=("_want", "_got"), indicator=True)
    missing = merged[merged["_merge"] != "both"]
    assert missing.empty, missing[keys + ["_merge"]].head(20)
    w, g = merged[f"{value}_want"].to_numpy(), merged[f"{value}_got"].to_numpy()
    # relative to the value; a value that is 0 in float64 must be 0 on both sides
    bad = ~((w == g) | (np.abs(g - w) <= 1e-6 * np.abs(w)))
    assert not bad.any(), merged.loc[bad, keys + [f"{value}_want", f"{value}_got"]]


@pytest.mark.parametrize("mode", ["ddp", "fsdp2", "ddp-zero-grad-first",
                                  "fsdp2-zero-grad-first"])
def test_two_ranks_equal_one_process_on_the_global_batch(mode, tmp_path, reference) -> None:
    """Also when the loop clears the gradients before ``probe.step()``: the probe reads the
    reduced gradients at the end of each backward pass, not in ``step()``."""
    got = _run(mode, tmp_path)
    want = reference["table"]
    # every metric of every layer: sites, blocks, inputs and all five weights
    assert set(want["metric"]) == set(available_metrics())
    assert {"grad_norm", "grad_mean"} <= set(got["table"]["metric"])
    assert {"0", "2", "4", "6", "8", "1", "3", "5", "7"} <= set(want["layer"])
    assert sorted(set(want["step"])) == list(range(STEPS + 1))
    # the largest activation sits in either rank's half of the batch on some step, so the
    # global token index (rank 0's tokens first) is compared on both sides of the offset
    tokens = want[want["metric"] == "act_absmax_token"]["value"]
    assert (tokens >= BATCH // WORLD).any() and (tokens < BATCH // WORLD).any()
    _assert_same(got["table"], want, ["step", "layer", "metric"], "value")
    _assert_same(got["hist"], reference["hist"], ["step", "layer", "kind", "bin_left"], "count")
    # one reduction per step close: MAX (+ layout check), SUM, and one all-gather
    assert got["counts"] == [3] * STEPS, got["counts"]
    assert "cannot merge" in got["refused"]


def _session_worker(rank: int, init: str, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=WORLD)
    try:
        from actlab.integrations._session import ProbeSession

        model = nn.parallel.DistributedDataParallel(_model())
        session = ProbeSession(every=1, metrics=None, activations=None, curvature=None,
                               probe_kwargs={"weights": None})
        session.begin(model)
        half = BATCH // WORLD
        opt = torch.optim.SGD(model.parameters(), lr=0.2)
        logs = []
        for x, y in _data():
            opt.zero_grad()
            x, y = x[rank * half:(rank + 1) * half], y[rank * half:(rank + 1) * half]
            nn.functional.mse_loss(model(x), y).backward()
            session.before_update()  # what the callbacks do before the optimizer step
            opt.step()
            opt.zero_grad()  # as the HF Trainer does before on_step_end
            logs.append(session.optimizer_step())
        session.end()
        with open(f"{out}.{rank}", "wb") as fh:
            pickle.dump(logs, fh)
        del session, model, opt
        _release_ddp()
    finally:
        dist.destroy_process_group()


def test_callback_session_probes_every_rank_and_logs_on_rank_0(tmp_path) -> None:
    out = str(tmp_path / "session")
    mp.spawn(_session_worker, args=(f"file://{tmp_path / 'session.store'}", out),
             nprocs=WORLD, join=True)
    with open(f"{out}.0", "rb") as fh:
        logs0 = pickle.load(fh)
    with open(f"{out}.1", "rb") as fh:
        logs1 = pickle.load(fh)
    assert all(not entry for entry in logs1)  # only rank 0 reports

    model = _model()
    probe = Probe(model, every=1)
    _train(model, probe, _data())
    want = probe.table()
    for step, logged in enumerate(logs0):
        rows = want[want["step"] == step]
        assert rows.shape[0] == len(logged) > 0
        for metric, layer, value in zip(rows["metric"], rows["layer"], rows["value"]):
            got = logged[f"actlab/{metric}/{layer}"]
            assert got == value or abs(got - value) <= 1e-6 * abs(value), (step, metric, layer)
