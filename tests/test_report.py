"""Reports: every file referenced by report.html / index.html exists; headless render where possible."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

import pytest

from actlab.runner.report import judged_text

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _toy_experiments as toy  # noqa: E402


class References(HTMLParser):
    """Collects href/src attributes and the page's text."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.images: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):  # noqa: D102
        attrs = dict(attrs)
        if tag == "a" and attrs.get("href"):
            self.links.append(attrs["href"])
        if tag == "img":
            self.images.append(attrs["src"])

    def handle_data(self, data):  # noqa: D102
        self.text.append(data)


def parse(path: Path) -> References:
    parser = References()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


def assert_references_exist(page: Path, parser: References) -> None:
    for ref in parser.links + parser.images:
        assert "://" not in ref and not ref.startswith("/"), f"not relative: {ref}"
        assert (page.parent / unquote(ref)).is_file(), f"{page.name} links a missing file: {ref}"


@pytest.fixture(scope="module")
def faulty_run(tmp_path_factory):
    """A run with diverged and failed units (exit 1)."""
    out = tmp_path_factory.mktemp("report")
    result = toy.invoke("run", "toy", "--quick", "--set", "acts=relu,tanh,sigmoid", "--set",
                        "fail_act=tanh", "--set", "diverge_act=relu", "--name", "faults", "--out", out)
    assert result.exit_code == 1
    return out / "toy" / "faults"


def test_run_report_is_self_contained_and_lists_failures(faulty_run):
    page = faulty_run / "report.html"
    parser = parse(page)
    assert_references_exist(page, parser)
    assert parser.images == ["figures/loss.png"]
    for name in ("metrics.csv", "summary.json", "config.json", "env.json"):
        assert name in parser.links
    text = " ".join(parser.text)
    statuses = {json.loads(p.read_text())["id"]: json.loads(p.read_text())["status"]
                for p in (faulty_run / "units").glob("*.json")}
    for unit_id, status in statuses.items():  # every failed/diverged unit is listed
        assert (unit_id in text) == (status != "ok")
    assert "RuntimeError: boom in tanh" in text
    assert "relu: loss falls" in text  # the claims table
    assert "toy/relu/loss-falls" in text  # with its id and judged value
    claims = json.loads((faulty_run / "claims.json").read_text())
    relu = next(c for c in claims if c["id"] == "toy/relu/loss-falls")
    assert relu["comparison"] == "<" and relu["held"] == (relu["value"] < relu["threshold"])
    assert judged_text(relu) in text
    # `actlab report` rebuilds the same page from the files alone.
    before = page.read_bytes()
    page.unlink()
    result = toy.invoke("report", faulty_run)
    assert result.exit_code == 0 and page.read_bytes() == before


def test_report_of_a_folder_that_is_not_a_run_exits_2(tmp_path):
    result = toy.invoke("report", tmp_path)
    assert result.exit_code == 2 and "config.json" in result.stderr


def test_reproduce_writes_an_index_and_lists_failed_experiments(tmp_path):
    result = toy.invoke("reproduce", "--quick", "--only", "toy-broken-summary,toy", "--out", tmp_path)
    assert result.exit_code == 1
    assert "toy-broken-summary" in result.stderr and "summary exploded" in result.stderr
    index = tmp_path / "index.html"
    parser = parse(index)
    assert_references_exist(index, parser)
    assert "toy/quick/report.html" in parser.links
    assert "toy-broken-summary/quick/report.html" in parser.links  # its units ran; report exists
    text = " ".join(parser.text)
    assert "Failed: toy-broken-summary" in text
    summary = json.loads((tmp_path / "toy" / "quick" / "summary.json").read_text())
    for act in ("relu", "tanh"):
        held = summary["final_loss"][act] < summary["first_loss"][act]
        assert f"{act}: loss falls" in text and f"toy/{act}/loss-falls" in text
        assert held  # the toy's loss does fall in 6 steps; the index must say so
    cells = [t.strip() for t in parser.text if t.strip()]
    assert cells.count("yes") >= 2
    bad = toy.invoke("reproduce", "--only", "toy,nosuch", "--out", tmp_path / "x")
    assert bad.exit_code == 2 and "nosuch" in bad.stderr


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


@pytest.mark.skipif(_chromium() is None, reason="Chromium is not installed")
def test_report_renders_headless_with_every_image_loaded(faulty_run):
    images = parse(faulty_run / "report.html").images
    probe = faulty_run / "render_check.html"
    tags = "".join(f'<img src="{src}">' for src in images)
    probe.write_text(
        "<!DOCTYPE html><html><body>" + tags + "<script>window.addEventListener('load', () => {"
        "const ok = [...document.images].every(i => i.complete && i.naturalWidth > 0);"
        "document.body.setAttribute('data-images', ok ? 'all-loaded' : 'broken');});</script>"
        "</body></html>"
    )
    done = subprocess.run(
        [_chromium(), "--headless", "--disable-gpu", "--no-sandbox", "--allow-file-access-from-files",
         "--virtual-time-budget=5000", "--dump-dom", probe.as_uri()],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert 'data-images="all-loaded"' in done.stdout, done.stderr[-2000:]
    rendered = subprocess.run(
        [_chromium(), "--headless", "--disable-gpu", "--no-sandbox", "--dump-dom",
         (faulty_run / "report.html").as_uri()],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert "Claims" in rendered.stdout
