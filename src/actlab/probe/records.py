"""The probe's records: from device-side passes to the tidy table, writers and checkpoints.

:class:`ProbeRecords` is mixed into :class:`~actlab.probe.probe.Probe`. A closed step leaves
its passes as records on the device; :meth:`ProbeRecords.flush` moves them to the host in
one transfer per device, pools (and under a process group merges) each collector's passes,
and keeps the rows (the newest ``max_rows``), sending them to the writers. Reading them
(:meth:`~ProbeRecords.table`, :meth:`~ProbeRecords.histograms`, :meth:`~ProbeRecords.write`,
CSV / Parquet) and the probe's checkpoint (:meth:`~ProbeRecords.state_dict`,
:meth:`~ProbeRecords.load_state_dict`) live here too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
import torch

from actlab.probe import distributed as D
from actlab.probe.columns import COLUMNS
from actlab.probe.merge import Stat, Stats


def _frame(rows: list[tuple[int, str, str, float]]) -> pd.DataFrame:
    """Rows as the tidy table (columns step, layer, metric, value)."""
    return pd.DataFrame(rows, columns=COLUMNS).astype({"step": "int64", "value": "float64"})



class ProbeRecords:
    """Flushing, reading, writing and checkpointing of :class:`~actlab.probe.probe.Probe`."""

    def flush(self) -> None:
        """Move pending device-side records to the host (one transfer per device).

        Under a process group the records are merged when each recorded step closes (in
        :meth:`step`, collectively) and this does nothing.
        """
        if not self.distributed:
            self._flush_records()

    def _host_values(self, records: list) -> list[list[np.ndarray]]:
        """The records' tensors on the host, in float64 (one transfer per device)."""
        tensors = [t for rec in records for t in rec[3]]
        by_device: dict[torch.device, list[int]] = {}
        for i, t in enumerate(tensors):
            by_device.setdefault(t.device, []).append(i)
        host: list[np.ndarray] = [np.empty(0)] * len(tensors)
        for idx in by_device.values():
            flat = torch.cat([tensors[i].detach().reshape(-1).to(torch.float64) for i in idx]).cpu()
            values = flat.numpy()
            offset = 0
            for i in idx:
                size = tensors[i].numel()
                host[i] = values[offset:offset + size].reshape(tuple(tensors[i].shape))
                offset += size
        out, cursor = [], 0
        for rec in records:
            out.append(host[cursor:cursor + len(rec[3])])
            cursor += len(rec[3])
        return out

    def _flush_records(self) -> None:
        """Pool, merge (across ranks under a process group) and store the pending records."""
        records, self._records = self._records, []
        if not records and not self.distributed:
            return
        stats: list[Stats | None] = []
        values: list[Any] = []
        for (collector, _, where, _, metas), parts in zip(records, self._host_values(records)):
            # passes of different sizes (e.g. a last, smaller batch) cannot be stacked
            same = len({p.shape for p in parts}) <= 1
            stacked = np.stack(parts) if parts and same else parts
            values.append(stacked)
            if collector is None:  # histogram counts: pre and post
                stats.append({"counts": Stat("sum", stacked.sum(axis=0))})
            else:
                stats.append(collector.stats(where, stacked, metas) if collector.mergeable
                             else None)
        if self.distributed:
            # replicated weights (DDP) are identical on every rank: only shards are reduced
            shared = [i for i, rec in enumerate(records) if getattr(rec[2], "sharded", True)]
            for i, merged in zip(shared, D.reduce_stats([stats[i] for i in shared])):
                stats[i] = merged
        wanted = set(self.metrics)
        rows: list[tuple[int, str, str, float]] = []
        hist: list[tuple[int, str, str, np.ndarray]] = []
        for (collector, step, where, _, metas), value, st in zip(records, values, stats):
            if collector is None:
                counts = st["counts"].value
                hist += [(step, where.name, "pre", counts[0]), (step, where.name, "post", counts[1])]
                continue
            out = collector.finish(where, st) if st is not None else \
                collector.combine(where, value, metas)
            rows.extend((step, where.name, metric, float(v))
                        for metric, v in out.items() if metric in wanted)
        self._store(rows, hist)

    def _store(self, rows: list[tuple[int, str, str, float]],
               hist: list[tuple[int, str, str, np.ndarray]]) -> None:
        """Send new rows to the writers (rank 0), keep them, and drop the oldest beyond
        ``max_rows`` (cost bounded by ``max_rows``, not by the run's length)."""
        if rows and self.writers and self._writes:
            frame = _frame(rows)
            for writer in self.writers:
                writer.write(frame)
        hist_writers = [w for w in self.writers if callable(getattr(w, "write_histograms", None))]
        if hist and hist_writers and self._writes:
            frame = self._hist_frame(hist)
            for writer in hist_writers:
                writer.write_histograms(frame)
        self._rows.extend(rows)
        self._hist_rows.extend(hist)
        if self.max_rows is not None:
            excess = len(self._rows) - self.max_rows
            if excess > 0:
                del self._rows[:excess]
                self._row_base += excess
            excess = len(self._hist_rows) - self.max_rows
            if excess > 0:
                del self._hist_rows[:excess]

    def table(self) -> pd.DataFrame:
        """The recorded values kept in memory (all of them unless ``max_rows``) as a tidy
        DataFrame with columns step, layer, metric, value."""
        self.flush()
        return _frame(self._rows)

    def histograms(self) -> pd.DataFrame:
        """Recorded histograms: columns step, layer, kind (pre/post), bin_left, bin_right, count."""
        self.flush()
        if self.hist_bins is None:
            raise ValueError("no histograms: create the Probe with histograms=<bins>")
        return self._hist_frame(self._hist_rows)

    def _hist_frame(self, hist: list[tuple[int, str, str, np.ndarray]]) -> pd.DataFrame:
        """Histogram rows as the frame :meth:`histograms` returns."""
        edges = np.linspace(*self.hist_range, self.hist_bins + 1)
        frames = [pd.DataFrame({"step": step, "layer": name, "kind": kind,
                                "bin_left": edges[:-1], "bin_right": edges[1:], "count": counts})
                  for step, name, kind, counts in hist]
        if not frames:
            return pd.DataFrame(columns=["step", "layer", "kind", "bin_left", "bin_right", "count"])
        return pd.concat(frames, ignore_index=True)

    # ------------------------------------------------------------------ writers
    def write(self, writer: Any) -> int:
        """Send the rows not yet sent to ``writer`` (anything with ``write(df)``, e.g.
        :class:`~actlab.probe.writers.TensorBoardWriter`); returns how many were sent.

        Rows already dropped by ``max_rows`` are skipped (pass ``writers=`` to stream every
        row); under a process group only rank 0 sends."""
        self.flush()
        # only the rows not yet sent are converted: the cost does not grow with the table
        start = max(self._written.get(id(writer), 0), self._row_base)
        new = self._rows[start - self._row_base:]
        self._written[id(writer)] = self._row_base + len(self._rows)
        if not new or not self._writes:
            return 0
        writer.write(_frame(new))
        return len(new)

    def to_csv(self, path: Any) -> None:
        """Write the table as CSV."""
        from actlab.probe.writers import write_csv

        write_csv(self.table(), path)

    def to_parquet(self, path: Any) -> None:
        """Write the table as Parquet (needs pyarrow: ``pip install actlab[parquet]``)."""
        from actlab.probe.writers import write_parquet

        write_parquet(self.table(), path)

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps of the probe: the step, the step whose weights were last
        recorded, and per tracked weight its initial (``w0``) and last recorded (``w_prev``)
        snapshots with ``w0``'s moments (``m0``), as tensors; under FSDP2 the local shards
        (save one per rank). Recorded rows are not included: stream them with ``writers``.
        """
        return {"step": self._step, "weights_at": self._weights_at,
                "weights": {w.name: {"w0": w.w0.clone(), "w_prev": w.w_prev.clone(),
                                     "m0": w.m0.clone()} for w in self.weights}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from :meth:`state_dict` output (load the model's weights first).

        Pending records of the new probe (e.g. the weights it recorded when created) are
        dropped; the weights of the resumed step are recorded unless the saved run already had.
        """
        if self._closed:
            raise RuntimeError("Probe.load_state_dict() after close()")
        try:
            step, weights_at, saved = int(state["step"]), int(state["weights_at"]), state["weights"]
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a Probe state_dict: {exc!r}") from None
        names = [w.name for w in self.weights]
        if sorted(saved) != sorted(names):
            raise ValueError(f"probe state tracks weights {sorted(saved)}, this probe {sorted(names)}")
        for weight in self.weights:
            for key in ("w0", "w_prev", "m0"):
                mine, theirs = getattr(weight, key), saved[weight.name][key]
                if tuple(theirs.shape) != tuple(mine.shape):
                    raise ValueError(f"probe state: {weight.name}.{key} has shape "
                                     f"{tuple(theirs.shape)}, expected {tuple(mine.shape)}")
                mine.copy_(theirs)
            weight.passes = {}
        for where in (*self.sites, *self.blocks, *self.inputs):
            where.passes, where.hist = {}, None
        self._records.clear()
        self._step, self._weights_at = step, weights_at
        due = self.schedule.due(step)
        self._set_recording(due)
        if due and weights_at != step:
            self._record_weights(step)
