"""Cost of one probe record with 10^3 and with 10^6 rows already recorded.

A days-long run must not slow down as its table grows. A small MLP (4 Linear + 3 activation
sites, default metrics, ~60 rows per recorded step) trains with a probe recording every step;
before timing, the probe's in-memory table is filled to the given size with copies of real
rows (as if the run had been going for a long time; recording 10^6 rows for real would take
~15k steps). Timed, per record, on the process's CPU clock: only the probe's own work,

* ``probe``: ``Probe.step()`` closing a recorded step, with a writer receiving its rows;
* ``callback``: ``ProbeSession.optimizer_step()``, the path of the HF and Lightning
  ``ProbeCallback`` (close the step, read the new rows, build the logged dict).

The figure is the median over ``--records`` records; the ratio 10^6 / 10^3 should be ~1.

    python benchmarks/probe_record_cost.py [--records 30] [--threads 1]

The last line printed is a JSON object of the timings (seconds) and ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import pandas as pd
import torch
from torch import nn

from actlab.integrations._session import ProbeSession
from actlab.probe import Probe


class _Sink:
    """A writer that only counts what it receives."""

    def __init__(self) -> None:
        self.rows = 0

    def write(self, df: pd.DataFrame) -> None:
        self.rows += len(df)


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 64), nn.Tanh(),
                         nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8))


def _grow(probe: Probe, rows: int) -> None:
    """Fill the probe's in-memory table to ``rows`` rows with copies of its real rows."""
    probe.flush()
    real = list(probe._rows) or [(0, "0", "weight_mean", 0.0)]
    while len(probe._rows) < rows:
        probe._rows.extend(real[:rows - len(probe._rows)])


def _time_records(close: Callable[[], object], model: nn.Module, records: int) -> float:
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(64, 32), torch.randn(64, 8)
    times = []
    for _ in range(records):
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        start = time.process_time()
        close()
        times.append(time.process_time() - start)
    return statistics.median(times)


def probe_cost(rows: int, records: int) -> float:
    """Median seconds of ``Probe.step()`` with a writer, at ``rows`` existing rows."""
    model = _model()
    probe = Probe(model, every=1, writers=[_Sink()])
    _time_records(probe.step, model, 2)
    _grow(probe, rows)
    return _time_records(probe.step, model, records)


def callback_cost(rows: int, records: int) -> float:
    """Median seconds of ``ProbeSession.optimizer_step()`` at ``rows`` existing rows."""
    model = _model()
    session = ProbeSession(every=1, metrics=None, activations=None, curvature=None,
                           probe_kwargs={})
    session.begin(model)
    _time_records(session.optimizer_step, model, 2)
    _grow(session.probe, rows)
    session.probe.write(session._sink)  # the grown rows count as sent before
    session._sink.frames = []
    return _time_records(session.optimizer_step, model, records)


def main() -> None:
    """Time one record at 10^3 and 10^6 existing rows and print the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    figures: dict[str, float] = {}
    for name, cost in (("probe", probe_cost), ("callback", callback_cost)):
        small, large = cost(10**3, args.records), cost(10**6, args.records)
        figures[f"{name}_s_at_1e3"], figures[f"{name}_s_at_1e6"] = small, large
        figures[f"{name}_ratio"] = large / small
        print(f"{name:9s} one record: {small * 1e3:7.3f} ms at 10^3 rows, "
              f"{large * 1e3:7.3f} ms at 10^6 rows, ratio {large / small:.2f}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
