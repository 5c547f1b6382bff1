"""``actlab list`` and ``actlab info``: output, JSON keys, plots and user errors."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import actlab
from actlab.cli import main

REPO = Path(__file__).resolve().parents[1]


def _invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def test_list_shows_every_activation_with_a_description():
    result = _invoke("list")
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    names = [line.split()[0] for line in lines]
    assert names == sorted(actlab.available_activations())
    assert all(len(line.split(maxsplit=1)) == 2 for line in lines)  # a description each


def test_info_json_has_exactly_the_documented_keys():
    result = _invoke("info", "relu", "--q", "2", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert list(data) == ["spec", "q", "mean", "second_moment", "slope_second_moment", "gain"]
    assert data["spec"] == "relu" and data["q"] == 2.0
    assert data["mean"] == pytest.approx(math.sqrt(2 / (2 * math.pi)), abs=1e-12)
    assert data["second_moment"] == pytest.approx(1.0, abs=1e-12)
    assert data["gain"] == pytest.approx(math.sqrt(2), abs=1e-12)


def test_info_text_and_plot(tmp_path):
    target = tmp_path / "gelu.png"
    result = _invoke("info", "gelu", "--plot", str(target))
    assert result.exit_code == 0, result.output
    assert "1.533530" in result.output  # the handbook's GELU gain 1.5335
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("info", "gelux"), "gelu"),
        (("info", "relu", "--q", "-1"), "q"),
        (("info", "gelu:adaptive"), "adaptive"),
        (("info", "leaky_relu:slope=nan"), "slope"),
        (("info", "relu", "--plot", "no/such/folder/x.png"), "folder"),
    ],
)
def test_user_errors_are_one_line_exit_code_2(args, fragment):
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 2
    error_lines = result.stderr.strip().splitlines()
    assert len(error_lines) == 1 and fragment in error_lines[0]
    assert "Traceback" not in result.output


@pytest.mark.slow
def test_installed_script_errors_without_traceback():
    script = Path(sys.executable).parent / "actlab"
    if not script.exists():
        pytest.skip("the actlab console script is not installed next to this interpreter")
    bad = subprocess.run([str(script), "info", "gelux", "--json"], capture_output=True,
                         text=True, cwd=REPO, timeout=60)
    assert bad.returncode == 2
    assert bad.stdout == ""
    assert len(bad.stderr.strip().splitlines()) == 1 and "gelu" in bad.stderr
