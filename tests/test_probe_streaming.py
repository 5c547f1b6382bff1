"""Long runs: rows streamed at each record, bounded memory, mergeable statistics, checkpoints."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from actlab.errors import ConfigError
from actlab.probe import Probe
from actlab.probe.merge import Stat, merge_stats, merge_values
from actlab.probe.metrics import WEIGHT_STATE
from actlab.train.callbacks import ProbeStep


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 8), nn.ReLU(),
                         nn.Linear(8, 2)).double()


def _batches(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(3)
    return [(torch.randn(7, 5, generator=g, dtype=torch.float64),
             torch.randn(7, 2, generator=g, dtype=torch.float64)) for _ in range(n)]


def _train(model: nn.Module, probe: Probe, batches: list, after=None) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=0.3)
    for x, y in batches:
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        probe.step()
        if after is not None:
            after()


class _Sink:
    def __init__(self) -> None:
        self.frames: list[pd.DataFrame] = []

    def write(self, df: pd.DataFrame) -> None:
        self.frames.append(df)


def test_writers_get_each_step_when_it_closes_and_all_rows_in_the_end() -> None:
    batches = _batches(5)
    plain_model, streamed_model = _model(), _model()
    plain = Probe(plain_model, every=2)
    _train(plain_model, plain, batches)
    sink = _Sink()
    streamed = Probe(streamed_model, every=2, writers=[sink])
    seen: list[dict[int, int]] = []
    _train(streamed_model, streamed, batches, after=lambda: seen.append(
        pd.concat(sink.frames)["step"].value_counts().to_dict()))
    # the weights of a recorded step arrive when the step before it closes, the rest when it
    # closes itself
    n_weights = int(plain.table()["metric"].isin(WEIGHT_STATE).groupby(plain.table()["step"]).sum()[4])
    assert [set(s) for s in seen] == [{0}, {0, 2}, {0, 2}, {0, 2, 4}, {0, 2, 4}]
    assert seen[1][2] == n_weights < seen[2][2] == seen[0][0]
    plain.close()
    streamed.close()
    pd.testing.assert_frame_equal(pd.concat(sink.frames, ignore_index=True), plain.table())


def test_max_rows_keeps_the_newest_rows_only() -> None:
    batches = _batches(6)
    full_model, kept_model = _model(), _model()
    full = Probe(full_model, every=1)
    _train(full_model, full, batches)
    kept = Probe(kept_model, every=1, max_rows=50)
    _train(kept_model, kept, batches)
    want = full.table()
    got = kept.table()
    assert len(got) == 50 < len(want)
    pd.testing.assert_frame_equal(got, want.iloc[-50:].reset_index(drop=True))
    sink = _Sink()
    assert kept.write(sink) == 50  # the dropped rows are gone for a new writer too


@pytest.mark.parametrize("kwargs, error", [({"max_rows": -1}, ConfigError),
                                           ({"max_rows": 2.5}, ConfigError),
                                           ({"writers": [object()]}, TypeError),
                                           ({"distributed": True}, ConfigError)])
def test_bad_streaming_arguments_are_refused(kwargs, error) -> None:
    with pytest.raises(error):
        Probe(_model(), **kwargs)


def test_a_resumed_probe_continues_the_uninterrupted_table() -> None:
    batches = _batches(6)
    model = _model()
    whole = Probe(model, every=1)
    _train(model, whole, batches)
    whole.close()

    model = _model()
    first = Probe(model, every=1)
    _train(model, first, batches[:3])
    state, weights = first.state_dict(), {k: v.clone() for k, v in model.state_dict().items()}
    first_rows = first.table()
    first.close()

    resumed_model = _model()  # a fresh process: initial weights, then the checkpoint
    resumed_model.load_state_dict(weights)
    second = Probe(resumed_model, every=1)
    second.load_state_dict(state)
    assert second.current_step == 3
    _train(resumed_model, second, batches[3:])
    second.close()
    got = pd.concat([first_rows, second.table()], ignore_index=True)
    want = whole.table()
    key = ["step", "layer", "metric"]
    got, want = got.sort_values(key).reset_index(drop=True), want.sort_values(key).reset_index(drop=True)
    pd.testing.assert_frame_equal(got[key], want[key])
    np.testing.assert_allclose(got["value"], want["value"], rtol=1e-12, atol=0)


def test_probe_step_callback_round_trips_the_probe_state() -> None:
    model = _model()
    probe = Probe(model, every=1)
    _train(model, probe, _batches(2))
    callback = ProbeStep(probe)
    json_state, tensors = callback.state_dict(), callback.state_tensors()
    assert json_state == {"step": 2, "weights_at": 2}
    other = ProbeStep(Probe(_model(), every=1))
    other.load_state_dict(json_state)
    other.load_state_tensors(tensors)
    for a, b in zip(probe.weights, other.probe.weights):
        assert torch.equal(a.w0, b.w0) and torch.equal(a.w_prev, b.w_prev)
    assert other.probe.current_step == 2
    with pytest.raises(ValueError, match="tracks weights"):
        Probe(_model(), every=1, weights=["0"]).load_state_dict(probe.state_dict())


def _moments(x: np.ndarray) -> np.ndarray:
    return np.array([x.size, x.mean() if x.size else 0.0, ((x - x.mean()) ** 2).sum() if x.size else 0.0])


def test_chan_merges_equal_the_moments_of_the_concatenation() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(1e4, 1e-2, 1000)  # |mean| >> std: raw power sums would cancel
    y = rng.normal(-3.0, 2.0, 1000)
    cuts = [0, 0, 17, 400, 1000]  # an empty part included
    parts = [x[a:b] for a, b in zip(cuts, cuts[1:])]
    got = merge_values("moments", [_moments(p) for p in parts])
    np.testing.assert_allclose(got, _moments(x), rtol=1e-9)
    co = [np.array([b - a, x[a:b].mean() if b > a else 0, y[a:b].mean() if b > a else 0,
                    ((x[a:b] - x[a:b].mean()) * (y[a:b] - y[a:b].mean())).sum() if b > a else 0])
          for a, b in zip(cuts, cuts[1:])]
    want = ((x - x.mean()) * (y - y.mean())).sum()
    np.testing.assert_allclose(merge_values("comoments", co)[3], want, rtol=1e-9)
    merged = merge_stats([{"m": Stat("max", [1.0, 5.0])}, {"m": Stat("max", [3.0, 2.0])}])
    np.testing.assert_array_equal(merged["m"].value, [3.0, 5.0])
    with pytest.raises(ValueError, match="unknown merge rule"):
        Stat("median", [1.0])
