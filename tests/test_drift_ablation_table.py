"""``tools/drift_ablation_table.py``: the table docs/drift_sparsity.md shows is the one the
kept evidence gives, and its intervals are Student's t over the seeds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _tools import load_tool
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]


def _tool():
    return load_tool("drift_ablation_table")


def test_the_documented_ablation_table_is_the_evidence_table(capsys):
    _tool().main([])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    doc = (ROOT / "docs" / "drift_sparsity.md").read_text()
    assert len(lines) > 10
    for line in lines:
        assert line in doc, line


def test_the_width_row_reads_the_seeds_with_a_t_interval():
    tool = _tool()
    run = ROOT / "docs" / "results" / "drift" / "evidence-ablation-width"
    seeds = json.loads((run / "seed_summaries.json").read_text())
    wide = next(p for p in seeds["points"] if p["point"] == {"real_hidden": "1024"})
    values = [s["activations"]["relu"]["digits"]["mean_shift_later_layers"]
              for s in wide["summaries"]]
    n = len(values)
    mean = sum(values) / n
    sd = (sum((v - mean) ** 2 for v in values) / (n - 1)) ** 0.5
    half = stats.t.ppf(0.975, n - 1) * sd / n ** 0.5
    row = next(r for r in tool.rows(run) if r[1] == "real_hidden=1024")
    assert row[3] == f"{mean:+.2e} [{mean - half:+.1e}, {mean + half:+.1e}]"
    assert row[4].split() == [f"{v:+.1e}" for v in values]
    assert mean == pytest.approx(float(row[3].split()[0]), rel=1e-2)
