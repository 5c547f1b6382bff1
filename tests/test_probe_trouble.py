"""The statistics that flag trouble (RMS, kurtosis, non-finite counts, the largest activation
and where it sits, update ratio, the gradient at the output) against brute force on the
captured tensors, and the merge rules behind them against NumPy on split data."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import actlab
from actlab.probe.merge import merge_values
from actlab.probe.metrics import ACT_KURTOSIS, ACT_OUTPUT_GRAD, ALL_METRICS

EVERYTHING = ALL_METRICS + ACT_KURTOSIS + ACT_OUTPUT_GRAD


def _kurtosis(x: np.ndarray) -> float:
    d = x - x.mean()
    return float((d**4).mean() / (d**2).mean() ** 2)


def _central(x: np.ndarray) -> list[float]:
    d = x - x.mean()
    return [x.size, x.mean(), (d**2).sum(), (d**3).sum(), (d**4).sum()]


def test_fourth_moments_merge_like_numpy_on_split_data() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_t(5, size=1000) * 3 + 1e3  # heavy tails, |mean| >> std
    parts = np.split(x, [7, 300, 301, 640])  # unequal sizes, one of a single element
    rows = [np.array(_central(p)) for p in parts] + [np.zeros(5)]  # an empty part: identity
    got = merge_values("moments4", rows)
    np.testing.assert_allclose(got, _central(x), rtol=1e-9)
    # another grouping of the same parts gives the same moments
    left = merge_values("moments4", rows[:2])
    right = merge_values("moments4", rows[2:])
    np.testing.assert_allclose(merge_values("moments4", [left, right]), got, rtol=1e-9)


def test_argmax_merge_is_the_location_in_the_concatenation() -> None:
    rng = np.random.default_rng(1)
    parts = [rng.normal(size=n) for n in (5, 9, 4, 7)]
    parts[2][3] = 40.0  # the winner: position 5 + 9 + 3 of the concatenation
    rows = [np.array([np.abs(p).max(), p.size, np.abs(p).argmax(), 0.0]) for p in parts]
    key, count, loc, _ = merge_values("argmax", rows)
    whole = np.concatenate(parts)
    assert (key, count, loc) == (np.abs(whole).max(), whole.size, np.abs(whole).argmax())
    # ties keep the earlier part; a NaN key wins (it must not hide behind a finite one)
    tie = merge_values("argmax", [np.array([2.0, 3, 1, 0]), np.array([2.0, 4, 0, 0])])
    assert tie[2] == 1
    nan = merge_values("argmax", [np.array([9.0, 3, 1, 0]), np.array([np.nan, 4, 2, 0])])
    assert np.isnan(nan[0]) and nan[2] == 3 + 2


def _captured_run() -> tuple[actlab.Probe, dict, nn.Sequential]:
    """Two passes of different batch sizes in step 0, one SGD step, step 1 recorded too;
    the site's input, output and output gradient captured by hooks of the test."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 8), nn.GELU(), nn.Linear(8, 2)).double()
    seen: dict = {"p": [], "a": [], "w": [model[0].weight.detach().clone()]}

    def capture(module, inputs, output):
        output.retain_grad()
        seen["p"].append(inputs[0].detach().clone())
        seen["a"].append(output)

    model[1].register_forward_hook(capture)
    probe = actlab.Probe(model, every=1, metrics=EVERYTHING)
    opt = torch.optim.SGD(model.parameters(), lr=0.3)
    gen = torch.Generator().manual_seed(2)
    for shape in ((3, 4, 5), (2, 4, 5)):
        model(torch.randn(*shape, generator=gen, dtype=torch.float64)).square().mean().backward()
    opt.step()
    seen["w"].append(model[0].weight.detach().clone())
    probe.step()
    model(torch.randn(2, 4, 5, generator=gen, dtype=torch.float64)).sum().backward()
    probe.step()
    return probe, seen, model


def test_site_statistics_equal_brute_force_on_the_captured_tensors() -> None:
    probe, seen, _ = _captured_run()
    table = probe.table()
    got = table[(table.step == 0) & (table.layer == "1")].set_index("metric")["value"]
    p = torch.cat([t.reshape(-1, 8) for t in seen["p"][:2]]).numpy()
    a = torch.cat([t.detach().reshape(-1, 8) for t in seen["a"][:2]]).numpy()
    h = torch.cat([t.grad.reshape(-1, 8) for t in seen["a"][:2]]).numpy()
    token, channel = divmod(int(np.abs(a).argmax()), 8)
    want = {
        "act_rms": np.sqrt((a**2).mean()),
        "preact_rms": np.sqrt((p**2).mean()),
        "act_kurtosis": _kurtosis(a),
        "preact_kurtosis": _kurtosis(p),
        "act_absmax": np.abs(a).max(),
        "act_absmax_token": token,
        "act_absmax_channel": channel,
        "act_nonfinite": 0.0,
        "preact_nonfinite": 0.0,
        "act_grad_rms": np.sqrt((h**2).mean()),
        "act_grad_absmax": np.abs(h).max(),
        "act_grad_nonfinite": 0.0,
    }
    for metric, value in want.items():
        assert got[metric] == pytest.approx(value, rel=1e-9), metric
    assert token >= 12  # the largest |a| is in the second pass: its tokens follow the first's


def test_update_ratio_is_the_update_over_the_weight_norm() -> None:
    probe, seen, _ = _captured_run()
    table = probe.table()
    rows = table[(table.layer == "0") & table.metric.isin(["update_norm", "update_ratio"])]
    got = rows[rows.step == 1].set_index("metric")["value"]
    w0, w1 = seen["w"]
    update = float(torch.linalg.norm(w1 - w0))
    assert got["update_norm"] == pytest.approx(update, rel=1e-9)
    assert got["update_ratio"] == pytest.approx(update / float(torch.linalg.norm(w1)), rel=1e-9)
    assert rows[rows.step == 0]["value"].tolist() == [0.0, 0.0]  # no update before step 0


@pytest.mark.parametrize("first_wins", [True, False])
def test_absmax_location_of_a_planted_outlier(first_wins: bool) -> None:
    model = nn.Sequential(nn.ReLU())
    probe = actlab.Probe(
        model, every=1, metrics=["act_absmax", "act_absmax_token", "act_absmax_channel"]
    )
    gen = torch.Generator().manual_seed(3)
    x1, x2 = torch.randn(2, 5, 8, generator=gen), torch.randn(3, 5, 8, generator=gen)
    x1[1, 3, 6] = 100.0 if first_wins else 50.0  # token 1 * 5 + 3 of pass 1
    x2[2, 0, 1] = 50.0 if first_wins else 100.0  # token 10 (pass 1) + 2 * 5 + 0
    model(x1)
    model(x2)
    probe.step()
    got = probe.table().set_index("metric")["value"]
    assert got["act_absmax"] == 100.0
    assert (got["act_absmax_token"], got["act_absmax_channel"]) == (
        (8.0, 6.0) if first_wins else (20.0, 1.0)
    )


def test_nonfinite_elements_are_counted_and_make_the_moments_nan() -> None:
    model = nn.Sequential(nn.Tanh())
    probe = actlab.Probe(model, every=1, metrics=EVERYTHING)
    x = torch.randn(4, 6, requires_grad=True)
    with torch.no_grad():
        x[0, 1], x[2, 2], x[3, 5] = float("nan"), float("nan"), float("inf")
    model(x).sum().backward()
    probe.step()
    model(torch.randn(4, 6, requires_grad=True)).sum().backward()  # a clean step after it
    probe.step()
    table = probe.table()
    bad = table[table.step == 0].set_index("metric")["value"]
    clean = table[table.step == 1].set_index("metric")["value"]
    assert bad["preact_nonfinite"] == 3 and bad["act_nonfinite"] == 2  # tanh(inf) = 1
    assert bad["act_grad_nonfinite"] == 0  # dL/da = 1 everywhere
    assert np.isnan(bad["act_mean"]) and np.isnan(bad["act_rms"]) and np.isnan(bad["act_absmax"])
    assert (clean[["preact_nonfinite", "act_nonfinite"]] == 0).all()
    assert np.isfinite(clean.drop(["saturation_frac"])).all()
