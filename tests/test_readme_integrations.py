"""The README's "Use actlab in your own training" examples run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _examples() -> list[str]:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Use actlab in your own training"):text.index("## Command line")]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_the_section_has_both_callbacks():
    examples = _examples()
    assert len(examples) == 2
    assert "actlab.integrations.transformers" in examples[0]
    assert "actlab.integrations.lightning" in examples[1]


def test_hf_trainer_example_runs_and_writes_tensorboard_values(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    tb = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "readme_hf"}
    exec(compile(_examples()[0], "README-hf", "exec"), namespace)
    table = namespace["callback"].table()
    # every=10 over 20 steps: steps 0, 10 and the last, 19; curvature at the same steps
    assert set(table.step[table.layer != "model"]) == {0, 10, 19}
    assert set(table.step[table.layer == "model"]) == {0, 10, 19}
    tags = set()
    for events in (tmp_path / "runs" / "hf-probe").rglob("events.out.tfevents*"):
        acc = tb.EventAccumulator(str(events))
        acc.Reload()
        tags |= set(acc.Tags()["scalars"])
    assert "train/actlab/lambda_max/model" in tags
    assert any(t.startswith("train/actlab/act_mean/bert.encoder.layer.0") for t in tags)


def test_lightning_example_runs_and_logs(tmp_path, monkeypatch):
    pytest.importorskip("lightning")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "readme_pl"}
    exec(compile(_examples()[1], "README-lightning", "exec"), namespace)
    table = namespace["callback"].table()
    assert {"act_mean", "lambda_max"} <= set(table.metric)
    logged = namespace["trainer"].logged_metrics
    assert "actlab/lambda_max/model" in logged and "actlab/act_mean/net.1" in logged
