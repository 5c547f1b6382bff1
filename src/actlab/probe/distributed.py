"""Merging a recorded step's statistics across the ranks of a process group.

Every rank pools its own passes into :data:`~actlab.probe.merge.Stats`; :func:`reduce_stats`
then merges them with at most three collectives per recorded step, whatever the number of
layers:

1. one ``all_reduce(MAX)`` of the packed ``max`` statistics, the negated ``min`` ones, a
   signature of the layout and the length of this rank's gathered part (checked first, so
   ranks that recorded different statistics fail with a clear error instead of hanging);
2. one ``all_reduce(SUM)`` of the packed ``sum`` statistics;
3. one ``all_gather`` of the packed ``moments``, ``comoments``, ``moments4``, ``argmax`` and
   ``concat`` statistics, merged on the host in rank order by the parallel formulas
   (:mod:`actlab.probe.merge`); an ``argmax`` location is thereby a position in the ranks'
   concatenation (rank 0's passes first).

Replicated records (a weight under DDP, identical on every rank) are not reduced.
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from actlab.probe.merge import Stat, Stats, merge_values

_GATHERED = ("moments", "comoments", "moments4", "argmax", "concat")


def world(group: Any = None) -> int:
    """The number of ranks of ``group`` (1 without an initialised process group)."""
    if not (dist.is_available() and dist.is_initialized()):
        return 1
    return dist.get_world_size(group)


def is_dtensor(t: Any) -> bool:
    """True for a ``torch.distributed.tensor.DTensor`` (an FSDP2 shard)."""
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # pragma: no cover - torch built without distributed
        return False
    return isinstance(t, DTensor)


def local(t: torch.Tensor) -> torch.Tensor:
    """The local shard of a DTensor (never gathered whole); any other tensor as it is."""
    return t.to_local() if is_dtensor(t) else t


def is_sharded(t: Any) -> bool:
    """True when ``t`` is a DTensor split across ranks (statistics must be reduced)."""
    return is_dtensor(t) and any(p.is_shard() for p in t.placements)


def _device(group: Any) -> torch.device:
    backend = str(dist.get_backend(group))
    if "gloo" in backend or "mpi" in backend:
        return torch.device("cpu")
    return torch.device("cuda", torch.cuda.current_device())


def _signature(records: list[Stats]) -> float:
    """A checksum of the names, rules and shapes (concat lengths excluded), exact in float64."""
    text = ";".join(",".join(f"{k}:{s.rule}:{s.value.shape if s.rule != 'concat' else ''}"
                             for k, s in stats.items()) for stats in records)
    return float(zlib.crc32(text.encode()))


def reduce_stats(records: list[Stats], group: Any = None) -> list[Stats]:
    """Merge every rank's ``records`` (same layout on every rank) into the global statistics.

    Collective: every rank of ``group`` must call it with the same records, in the same order.
    Raises ``RuntimeError`` when the ranks' layouts differ.
    """
    maxes = [s.value.reshape(-1) for st in records for s in st.values() if s.rule == "max"]
    maxes += [-s.value.reshape(-1) for st in records for s in st.values() if s.rule == "min"]
    sums = [s.value.reshape(-1) for st in records for s in st.values() if s.rule == "sum"]
    gathered = [s for st in records for s in st.values() if s.rule in _GATHERED]
    # concat lengths travel ahead of the data: they may differ across ranks
    header = [float(s.value.size) for s in gathered if s.rule == "concat"]
    payload = np.concatenate([np.asarray(header), *[s.value.reshape(-1) for s in gathered]]) \
        if gathered else np.zeros(0)
    sig = _signature(records)
    device = _device(group)

    head = np.concatenate([[sig, -sig, float(payload.size)], *maxes])
    top = torch.from_numpy(head).to(device)
    dist.all_reduce(top, op=dist.ReduceOp.MAX, group=group)
    top_np = top.cpu().numpy()
    if top_np[0] != -top_np[1]:
        raise RuntimeError("probe: the ranks recorded different statistics in this step (a "
                           "site, block or layer ran on some ranks only, or the probes differ); "
                           "every rank must run the same modules on a recorded step")
    total_sum = None
    if sums:
        total_sum = torch.from_numpy(np.concatenate(sums)).to(device)
        dist.all_reduce(total_sum, op=dist.ReduceOp.SUM, group=group)
        total_sum = total_sum.cpu().numpy()
    per_rank: list[np.ndarray] = []
    if gathered:
        width = int(top_np[2])
        padded = np.zeros(width)
        padded[:payload.size] = payload
        mine = torch.from_numpy(padded).to(device)
        parts = [torch.empty_like(mine) for _ in range(world(group))]
        dist.all_gather(parts, mine, group=group)
        per_rank = [p.cpu().numpy() for p in parts]

    merged_gathered = _unpack_gathered(gathered, len(header), per_rank)
    extremes = iter(_split(top_np[3:], [s for st in records for s in st.values()
                                        if s.rule == "max"]
                           + [s for st in records for s in st.values() if s.rule == "min"]))
    summed = iter(_split(total_sum, [s for st in records for s in st.values() if s.rule == "sum"])
                  if total_sum is not None else [])
    gathered_it = iter(merged_gathered)
    max_vals = {id(s): next(extremes) for st in records for s in st.values() if s.rule == "max"}
    min_vals = {id(s): -next(extremes) for st in records for s in st.values() if s.rule == "min"}
    out: list[Stats] = []
    for stats in records:
        merged: Stats = {}
        for name, s in stats.items():
            if s.rule == "max":
                value = max_vals[id(s)]
            elif s.rule == "min":
                value = min_vals[id(s)]
            elif s.rule == "sum":
                value = next(summed).reshape(s.value.shape)
            else:
                value = next(gathered_it)
            merged[name] = Stat(s.rule, value)
        out.append(merged)
    return out


def _split(flat: np.ndarray, stats: list[Stat]) -> list[np.ndarray]:
    out, offset = [], 0
    for s in stats:
        size = s.value.size
        out.append(flat[offset:offset + size].reshape(s.value.shape))
        offset += size
    return out


def _unpack_gathered(gathered: list[Stat], n_header: int,
                     per_rank: list[np.ndarray]) -> list[np.ndarray]:
    """Each gathered statistic merged over the ranks' packed vectors."""
    if not gathered:
        return []
    columns: list[list[np.ndarray]] = [[] for _ in gathered]
    for packed in per_rank:
        lengths = iter(packed[:n_header].astype(np.int64))
        offset = n_header
        for i, s in enumerate(gathered):
            size = int(next(lengths)) if s.rule == "concat" else s.value.size
            value = packed[offset:offset + size]
            offset += size
            columns[i].append(value if s.rule == "concat" else value.reshape(s.value.shape))
    return [merge_values(s.rule, col) for s, col in zip(gathered, columns)]
