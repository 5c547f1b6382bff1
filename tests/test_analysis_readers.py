"""Per-layer readers of the tidy table, residual and layer plots, and the backend rule."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from actlab import analysis


def _table(seed_count: int = 3, steps=(0, 10, 20), layers=("layer1", "layer2", "layer10")):
    rng = np.random.default_rng(0)
    rows = [(seed, step, layer, "weight_mean", float(rng.normal()))
            for seed in range(seed_count) for step in steps for layer in layers]
    return pd.DataFrame(rows, columns=["seed", "step", "layer", "metric", "value"])


def test_layer_number_reads_the_digits_after_the_prefix():
    assert analysis.layer_number("layer7") == 7
    assert analysis.layer_number("block3", prefix="block") == 3
    for label in ("", "layer", "layerx", "head", "block3"):
        assert analysis.layer_number(label) == -1


def test_change_per_layer_is_the_seed_mean_of_last_minus_first():
    table = _table()
    got = analysis.change_per_layer(table.sample(frac=1.0, random_state=1), "weight_mean")
    for layer in ("layer1", "layer2", "layer10"):
        values = table[table.layer == layer].pivot(index="step", columns="seed", values="value")
        assert got[layer] == pytest.approx(float((values.loc[20] - values.loc[0]).mean()))
    assert analysis.change_per_layer(table, "absent") == {}


def test_mean_value_at_step_and_finite_or_none():
    table = _table()
    last = analysis.at_step(table, "last")
    assert set(last.step) == {20} and len(last) == 9
    assert set(analysis.at_step(table, "first").step) == {0}
    assert analysis.mean_value(last) == pytest.approx(float(np.mean(last.value.to_numpy())))
    assert analysis.mean_value(table.iloc[:0]) is None
    with_nan = pd.DataFrame({"value": [1.0, np.nan, 3.0]})
    assert analysis.mean_value(with_nan) == 2.0  # NaN skipped
    assert analysis.mean_value(pd.DataFrame({"value": [1.0, np.inf]})) is None
    assert analysis.finite_or_none(np.float32(0.5)) == 0.5
    assert analysis.finite_or_none(float("nan")) is None and analysis.finite_or_none(None) is None
    with pytest.raises(ValueError, match="which"):
        analysis.at_step(table, "middle")


def test_plot_residual_and_layer_means_draw_what_they_read():
    from actlab.plotting import pyplot
    from actlab.probe.plots import plot_layer_means

    plt = pyplot()
    residual = pd.DataFrame({0: [0.1, -0.2, 0.3], 1: [0.3, 0.0, -0.1]}, index=[0, 5, 50])
    fig, (left, right) = plt.subplots(1, 2)
    analysis.plot_residual(left, residual)
    mean_line = left.lines[2]  # two seeds, then the mean
    np.testing.assert_allclose(mean_line.get_ydata(), residual.mean(axis=1).to_numpy())
    np.testing.assert_allclose(mean_line.get_xdata(), [1, 5, 50])  # step 0 drawn at 1 (log axis)
    table = _table()
    plot_layer_means(right, table, "weight_mean", relative=True)
    assert [line.get_label() for line in right.lines] == ["layer1", "layer2", "layer10"]
    expected = table[table.layer == "layer10"].groupby("step").value.mean()
    np.testing.assert_allclose(right.lines[2].get_ydata(), (expected - expected.iloc[0]).to_numpy())
    plt.close(fig)


@pytest.mark.parametrize("setup, expected", [
    ("", "agg"),  # nobody chose: files only (headless matplotlib would pick agg too)
    ("import matplotlib; matplotlib.use('svg'); import matplotlib.pyplot", "svg"),  # user chose
])
def test_pyplot_fills_in_agg_only_when_no_backend_was_chosen(setup, expected):
    code = f"{setup}\nfrom actlab.plotting import pyplot\nimport matplotlib\npyplot()\n" \
           "print(matplotlib.get_backend().lower())"
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         check=True)
    assert out.stdout.strip().endswith(expected)


def test_pyplot_keeps_the_backend_named_by_mplbackend():
    code = "from actlab.plotting import pyplot\nimport matplotlib\npyplot()\n" \
           "print(matplotlib.get_backend().lower())"
    env = {**os.environ, "MPLBACKEND": "pdf"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         check=True)
    assert out.stdout.strip().endswith("pdf")
