"""Probe writers (CSV, Parquet, TensorBoard, MLflow) and plot helpers."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from torch import nn

import actlab
from actlab.probe.writers import MLflowWriter, TensorBoardWriter, tag


def run_probe(steps: int = 4, **kwargs) -> actlab.Probe:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 8), nn.GELU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    probe = actlab.Probe(model, every=2, **kwargs)
    for _ in range(steps):
        model(torch.randn(16, 3)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        probe.step()
    return probe


def test_csv_and_parquet_round_trip(tmp_path) -> None:
    probe = run_probe()
    df = probe.table()
    probe.to_csv(tmp_path / "probe.csv")
    back = pd.read_csv(tmp_path / "probe.csv", dtype={"layer": str})
    assert list(back.columns) == ["step", "layer", "metric", "value"]
    assert back["step"].tolist() == df["step"].tolist()
    assert back["value"].to_numpy() == pytest.approx(df["value"].to_numpy(), rel=1e-12)
    pytest.importorskip("pyarrow")
    probe.to_parquet(tmp_path / "probe.parquet")
    back = pd.read_parquet(tmp_path / "probe.parquet")
    assert back["value"].tolist() == df["value"].tolist()
    assert back["layer"].tolist() == df["layer"].tolist()
    probe.close()


def test_tensorboard_writer_sends_each_row_once(tmp_path) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    probe = run_probe(steps=2, metrics=["act_mean", "drift_z"])
    writer = TensorBoardWriter(tmp_path / "tb")
    first = probe.write(writer)
    assert first == len(probe.table()) > 0
    assert probe.write(writer) == 0  # nothing new
    for _ in range(2):
        probe.model(torch.randn(4, 3)).sum().backward()
        probe.step()
    second = probe.write(writer)
    assert second == len(probe.table()) - first > 0
    writer.close()
    df = probe.table()
    probe.close()
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    row = df[(df.layer == "1") & (df.metric == "act_mean")]
    scalars = events.Scalars(tag("1", "act_mean"))
    assert [s.step for s in scalars] == row.step.tolist()
    assert [s.value for s in scalars] == pytest.approx(row.value.tolist(), rel=1e-6)


def test_mlflow_writer_local_file_store(tmp_path, monkeypatch) -> None:
    mlflow = pytest.importorskip("mlflow")
    # mlflow >= 3 keeps the file store only behind this switch; without it (or sqlalchemy for a
    # sqlite store, which mlflow-skinny lacks) there is no local backend to test against.
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = (tmp_path / "mlruns").as_uri()
    mlflow.set_tracking_uri(uri)
    try:
        mlflow.set_experiment("probe-test")
    except Exception as exc:  # pragma: no cover - depends on the installed mlflow
        pytest.skip(f"mlflow has no local file store here: {exc}")
    probe = run_probe(metrics=["preact_neg_frac"])
    df = probe.table()
    probe.close()
    try:
        with mlflow.start_run() as run:
            probe.write(MLflowWriter(tracking_uri=uri))
        history = mlflow.tracking.MlflowClient(uri).get_metric_history(
            run.info.run_id, tag("3", "preact_neg_frac"))
    finally:
        mlflow.set_tracking_uri(None)
    rows = df[(df.layer == "3")]
    got = sorted((m.step, m.value) for m in history)
    assert [s for s, _ in got] == rows.step.tolist()
    assert [v for _, v in got] == pytest.approx(rows.value.tolist(), rel=1e-12)


def test_plots(tmp_path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from actlab.probe.plots import plot_histogram_strip, plot_metric

    probe = run_probe(steps=6, histograms=16, hist_range=(-3, 3))
    df, hist = probe.table(), probe.histograms()
    probe.close()
    ax = plot_metric(df, "act_mean")
    assert len(ax.get_lines()) == 2  # two activation sites
    assert list(ax.get_lines()[0].get_xdata()) == [0, 2, 4]
    ax.figure.savefig(tmp_path / "m.png")
    ax = plot_histogram_strip(hist, "1", kind="pre")
    assert ax.images[0].get_array().shape == (16, 3)
    ax.figure.savefig(tmp_path / "h.png")
    assert (tmp_path / "h.png").stat().st_size > 0
    with pytest.raises(ValueError, match="act_mean"):
        plot_metric(df, "act_maen")
