"""``tools/ts_settings_table.py``: the settings table of docs/teacher_student.md is the one the
kept sweeps give, and each verdict column reads the run's own claim at the right point."""

from __future__ import annotations

import json
from pathlib import Path

from _tools import load_tool

ROOT = Path(__file__).resolve().parents[1]


def _tool():
    return load_tool("ts_settings_table")


def _assert_printed_table_is_in_the_doc(argv: list[str], capsys) -> None:
    """The tool's table for ``argv`` appears line by line in docs/teacher_student.md."""
    assert _tool().main(argv) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    doc = (ROOT / "docs" / "teacher_student.md").read_text()
    assert len(lines) > 10
    for line in lines:
        assert line in doc, line


def test_the_documented_table_is_the_sweeps_table(capsys):
    _assert_printed_table_is_in_the_doc([], capsys)


def _claim(point: str, cid: str, held, interval, reason: str = "") -> dict:
    return {"id": cid, "point": point, "held": held, "interval": interval, "reason": reason}


def test_verdicts_are_read_per_point_and_settings_sort_numerically(tmp_path, capsys):
    run = tmp_path / "sweep"
    run.mkdir()
    entry = {"final_loss_unshifted": 2.0, "final_loss_shifted": 1.0, "shifted_wins": 1.0}
    other = {"final_loss_unshifted": 1.0, "final_loss_shifted": 1.5, "shifted_wins": 0.0}
    summary = {"points": [{"point": {"steps": "12000"}, "summary": {"relu": other}},
                          {"point": {"steps": "2000"}, "summary": {"relu": entry}}]}
    (run / "summary.json").write_text(json.dumps(summary))
    ends, early = "teacher-student/relu/shifted-ends-lower", "teacher-student/relu/unshifted-faster-early"
    claims = [_claim("steps=2000", ends, True, [-1.5, -0.5]),
              _claim("steps=12000", ends, False, [0.25, 0.75]),
              _claim("steps=2000", early, None, None, "too few seeds: 1 (the bar needs 2)")]
    (run / "claims.json").write_text(json.dumps(claims))
    tool = _tool()
    assert tool.main([str(run), "--figure", str(tmp_path / "ratios.png")]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| steps")]
    assert lines == [
        "| steps=2000 | relu | 2 | 1 | 0.5000 | 1 | held [-1.5, -0.5] | undecided (too few seeds) |",
        "| steps=12000 | relu | 1 | 1.5 | 1.5000 | 0 | not held [0.25, 0.75] | not judged |",
    ]
    assert (tmp_path / "ratios.png").stat().st_size > 1000


def test_a_run_without_a_grid_is_one_setting_named_by_its_folder(tmp_path, capsys):
    run = tmp_path / "evidence-lr3e-4-8seeds"
    run.mkdir()
    entry = {"final_loss_unshifted": 4.0, "final_loss_shifted": 3.0, "shifted_wins": 0.75}
    (run / "summary.json").write_text(json.dumps({"scale": "x", "relu": entry}))
    claim = _claim(None, "teacher-student/relu/shifted-ends-lower", True, [-2.0, -0.5])
    (run / "claims.json").write_text(json.dumps([claim]))
    assert _tool().main([str(run)]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| lr3e")]
    assert lines == ["| lr3e-4-8seeds | relu | 4 | 3 | 0.7500 | 0.75 | held [-2, -0.5] | not judged |"]


def test_a_point_of_two_fields_gets_its_own_verdicts(tmp_path, capsys):
    # the runner labels such a point "lr=0.0003,steps=16000" in claims.json; the row must find it
    run = tmp_path / "sweep"
    run.mkdir()
    entry = {"final_loss_unshifted": 2.0, "final_loss_shifted": 1.0, "shifted_wins": 1.0}
    summary = {"points": [{"point": {"lr": "0.0003", "steps": "16000"}, "summary": {"relu": entry}}]}
    (run / "summary.json").write_text(json.dumps(summary))
    claim = _claim("lr=0.0003,steps=16000", "teacher-student/relu/shifted-ends-lower", False,
                   [0.5, 1.5])
    (run / "claims.json").write_text(json.dumps([claim]))
    assert _tool().main([str(run)]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| lr=")]
    assert lines == ["| lr=0.0003,steps=16000 | relu | 2 | 1 | 0.5000 | 1 | not held [0.5, 1.5] | not judged |"]


def test_a_folder_that_is_not_a_kept_run_is_refused(tmp_path, capsys):
    assert _tool().main([str(tmp_path)]) == 2
    assert "not a kept run" in capsys.readouterr().err


def test_the_documented_large_size_table_is_the_scans_table(capsys):
    # the (50, 200, 20) scans beside the --full run, as docs/teacher_student.md invokes it
    results = ROOT / "docs" / "results" / "teacher-student"
    runs = sorted(results.glob("evidence-scan-*")) + [results / "evidence-lr3e-4-8seeds",
                                                      results / "full"]
    assert len(runs) > 1
    _assert_printed_table_is_in_the_doc([str(run) for run in runs], capsys)
