"""Probe writers (CSV, Parquet, JSONL, TensorBoard, MLflow, W&B) and plot helpers; every
streaming writer is read back."""

from __future__ import annotations

import json
import struct
import time

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

import actlab
from actlab.probe.writers import (
    JsonlWriter,
    MLflowWriter,
    TensorBoardWriter,
    WandbWriter,
    read_jsonl,
    tag,
)


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


def test_one_key_scheme() -> None:
    assert tag("blocks.0.mlp.act", "act_mean") == "actlab/act_mean/blocks.0.mlp.act"
    assert tag("", "lambda_max") == "actlab/lambda_max/model"
    from actlab.integrations._session import key

    assert key("act_mean", "fc") == tag("fc", "act_mean")


def _histogram_lookup(hist: pd.DataFrame) -> dict:
    """``{(step, key): (edges, counts)}`` of a ``Probe.histograms()`` frame."""
    names = {"pre": "preact_hist", "post": "act_hist"}
    out = {}
    for (step, layer, kind), g in hist.groupby(["step", "layer", "kind"]):
        edges = np.append(g.bin_left.to_numpy(), g.bin_right.to_numpy()[-1])
        out[(int(step), tag(layer, names[kind]))] = (edges, g["count"].to_numpy())
    return out


def test_jsonl_writer_streams_rows_and_histograms(tmp_path) -> None:
    path = tmp_path / "run" / "probe.jsonl"
    writer = JsonlWriter(path)
    probe = run_probe(steps=4, histograms=5, hist_range=(-2, 2), writers=[writer])
    df, hist = probe.table(), probe.histograms()
    probe.close()
    writer.close()
    back = read_jsonl(path)
    pd.testing.assert_frame_equal(back, df)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert all(r["key"] == tag(r["layer"], r["metric"]) for r in lines)
    got = {(r["step"], r["key"]): (r["bin_edges"], r["counts"]) for r in lines if "counts" in r}
    want = _histogram_lookup(hist)
    assert got.keys() == want.keys() and len(got) == 2 * 2 * 2  # 2 steps x 2 sites x pre/post
    for k, (edges, counts) in want.items():
        assert got[k][0] == pytest.approx(edges.tolist()) and got[k][1] == counts.tolist()


def test_jsonl_writes_nonfinite_values_as_strict_json(tmp_path) -> None:
    path = tmp_path / "p.jsonl"
    writer = JsonlWriter(path)
    frame = pd.DataFrame({"step": [0, 0], "layer": ["a", "a"], "metric": ["x", "y"],
                          "value": [float("nan"), float("-inf")]})
    writer.write(frame)
    writer.close()
    assert '"value": "nan"' in path.read_text() and '"value": "-inf"' in path.read_text()
    back = read_jsonl(path)
    assert np.isnan(back.value[0]) and back.value[1] == float("-inf")


def test_tensorboard_writer_logs_fixed_bin_histograms(tmp_path) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    writer = TensorBoardWriter(tmp_path / "tb")
    probe = run_probe(steps=2, histograms=6, hist_range=(-3, 3), metrics=["act_mean"],
                      writers=[writer])
    hist = probe.histograms()
    probe.close()
    writer.close()
    events = EventAccumulator(str(tmp_path / "tb"), size_guidance={"histograms": 0})
    events.Reload()
    for (step, key), (edges, counts) in _histogram_lookup(hist).items():
        (event,) = [e for e in events.Histograms(key) if e.step == step]
        assert list(event.histogram_value.bucket) == counts.tolist()
        assert list(event.histogram_value.bucket_limit) == pytest.approx(edges[1:].tolist())


def _wandb_history(run_dir) -> list[dict] | None:
    """The history rows of an offline run, from its ``.wandb`` transaction log (``None``
    while its exit record is not written yet: wandb's service may still be writing).

    wandb (0.31) ships no reader of that file; it is a LevelDB-style log (a 7-byte ``:W&B``
    header, then 32 KiB blocks of records with a 7-byte header: crc32, length, type 1-4 =
    full/first/middle/last) of ``wandb_internal_pb2.Record`` messages, read here with
    wandb's own protobuf classes."""
    from wandb.proto import wandb_internal_pb2

    data = next(run_dir.glob("run-*.wandb")).read_bytes()
    assert data[:4] == b":W&B"
    pos, block, chunks, rows, finished = 7, 32768, b"", [], False
    while pos + 7 <= len(data):
        room = block - pos % block
        if room < 7:  # a block's tail too short for a header is padding
            pos += room
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunks += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a full record, or the last piece of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(chunks)
            chunks = b""
            finished |= record.WhichOneof("record_type") == "exit"
            if record.WhichOneof("record_type") == "history":
                row: dict = {}
                for item in record.history.item:  # a histogram's fields are nested keys
                    value = json.loads(item.value_json)
                    if item.key:
                        row[item.key] = value
                    else:
                        *path, last = item.nested_key
                        target = row
                        for part in path:
                            target = target.setdefault(part, {})
                        target[last] = value
                rows.append(row)
    return rows if finished else None


def test_wandb_writer_offline_run_read_back(tmp_path, monkeypatch) -> None:
    wandb = pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run = wandb.init(mode="offline", dir=str(tmp_path), project="actlab-test",
                     settings=wandb.Settings(silent=True, console="off"))
    try:
        probe = run_probe(steps=4, histograms=5, hist_range=(-2, 2),
                          metrics=["act_mean", "act_absmax", "drift_z"],
                          writers=[WandbWriter(run)])
        df, hist = probe.table(), probe.histograms()
        probe.close()
    finally:
        run.finish()
    run_dir = next((tmp_path / "wandb").glob("offline-run-*"))
    for _ in range(300):  # finish() may return before the service has written the log
        rows = _wandb_history(run_dir)
        if rows is not None:
            break
        time.sleep(0.1)
    assert rows is not None, "the offline run's log has no exit record"
    got = {}
    histograms = {}
    for row in rows:
        step = row["actlab/step"]
        for k, v in row.items():
            if isinstance(v, dict) and v.get("_type") == "histogram":
                histograms[(step, k)] = (v["bins"], v["values"])
            elif k.startswith("actlab/") and k != "actlab/step":
                got[(step, k)] = v
    want = {(int(r.step), tag(r.layer, r.metric)): r.value for r in df.itertuples()}
    assert got.keys() == want.keys()
    for k, v in want.items():
        assert got[k] == pytest.approx(v, rel=1e-12), k
    want_hist = _histogram_lookup(hist)
    assert histograms.keys() == want_hist.keys()
    for k, (edges, counts) in want_hist.items():
        assert histograms[k][0] == pytest.approx(edges.tolist())
        assert histograms[k][1] == counts.tolist()
