"""Reports: every file referenced by report.html / index.html exists; headless render where possible."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

import pytest

from actlab.runner.report import judged_text

import _toy_experiments as toy

# run and reproduce start a pool of every core: one xdist worker runs these (tests/conftest.py)
pytestmark = pytest.mark.xdist_group("processes")

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


@pytest.mark.slow
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
    # relu diverged in one of its two seeds: no interval, so no verdict, and the reason says so
    assert relu["comparison"] == "<" and relu["held"] is None and "finite" in relu["reason"]
    assert judged_text(relu) in text
    # `actlab report` rebuilds the same page from the files alone.
    before = page.read_bytes()
    page.unlink()
    result = toy.invoke("report", faulty_run)
    assert result.exit_code == 0 and page.read_bytes() == before


def test_report_of_a_folder_that_is_not_a_run_exits_2(tmp_path):
    result = toy.invoke("report", tmp_path)
    assert result.exit_code == 2 and "config.json" in result.stderr


@pytest.mark.slow
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
    claims = json.loads((tmp_path / "toy" / "quick" / "claims.json").read_text())
    for act in ("relu", "tanh"):
        assert summary["final_loss"][act] < summary["first_loss"][act]  # the loss does fall
        assert f"{act}: loss falls" in text and f"toy/{act}/loss-falls" in text
    # two seeds (t = 12.7): the index shows each claim's verdict over seeds as judged
    cells = [t.strip() for t in parser.text if t.strip()]
    verdict_cell = {True: "yes", False: "no", None: "undecided"}
    for claim in claims:
        assert verdict_cell[claim["held"]] in cells
        assert claim["n"] == 2 and claim["interval"] is not None
    bad = toy.invoke("reproduce", "--only", "toy,nosuch", "--out", tmp_path / "x")
    assert bad.exit_code == 2 and "nosuch" in bad.stderr


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def _assert_images_load(folder, images) -> None:
    """Load every image of ``images`` (paths relative to ``folder``) in headless Chromium."""
    probe = folder / "render_check.html"
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


@pytest.mark.skipif(_chromium() is None, reason="Chromium is not installed")
@pytest.mark.slow
def test_report_renders_headless_with_every_image_loaded(faulty_run):
    images = parse(faulty_run / "report.html").images
    _assert_images_load(faulty_run, images)
    rendered = subprocess.run(
        [_chromium(), "--headless", "--disable-gpu", "--no-sandbox", "--dump-dom",
         (faulty_run / "report.html").as_uri()],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert "Claims" in rendered.stdout


def _sections(page: Path) -> list[str]:
    """The page's h2 headings in order."""
    return re.findall(r"<h2[^>]*>([^<]+)</h2>", page.read_text(encoding="utf-8"))


@pytest.mark.slow
def test_run_report_shows_figures_then_claims_and_folds_the_summary(faulty_run):
    page = faulty_run / "report.html"
    heads = _sections(page)
    assert heads.index("Figures") < heads.index("Claims") < heads.index("Summary")
    text = page.read_text(encoding="utf-8")
    summary_at = text.index(">Summary</h2>")
    assert text.rfind("<details>", 0, summary_at) > text.index(">Claims</h2>")
    assert text.index("<details>", summary_at - 80) < summary_at  # the heading opens a details


@pytest.fixture(scope="module")
def reproduced(tmp_path_factory):
    out = tmp_path_factory.mktemp("index")
    result = toy.invoke("reproduce", "--quick", "--only", "toy,toy-broken-summary", "--out", out)
    assert result.exit_code == 1  # toy-broken-summary fails on purpose
    return out


@pytest.mark.slow
def test_index_opens_with_an_overview_of_counts_and_headline_thumbnails(reproduced):
    index = reproduced / "index.html"
    parser = parse(index)
    assert_references_exist(index, parser)
    assert _sections(index)[:2] == ["Overview", "Claims"]
    text = index.read_text(encoding="utf-8")
    overview = text[text.index(">Overview</h2>"):text.index(">Claims</h2>")]
    # thumbnails sit in the overview, before any claim row
    assert 'src="toy/quick/figures/loss.png"' in overview
    claims = json.loads((reproduced / "toy" / "quick" / "claims.json").read_text())
    held = [c["held"] for c in claims]
    row = overview[overview.index(">toy</a>"):]
    row = row[:row.index("</tr>")]
    counts = [int(n) for n in re.findall(r'class="(?:good|bad|undecided)">(\d+)<',
                                                       row)]
    assert counts == [held.count(True), held.count(False), held.count(None)]


def test_index_uses_the_declared_headline_figure_and_falls_back_to_the_first(tmp_path):
    from actlab.runner.report import write_index

    for name, figures in (("a", ["zeta.png", "alpha.png"]), ("b", ["one.png"])):
        folder = tmp_path / name / "quick" / "figures"
        folder.mkdir(parents=True)
        for fig in figures:
            (folder / fig).write_bytes(b"\x89PNG")
        (folder.parent / "report.html").write_text("<html></html>")
    entries = [
        {"experiment": "a", "report": "a/quick/report.html", "status": "ok", "claims": [],
         "headline_figure": "zeta"},
        {"experiment": "b", "report": "b/quick/report.html", "status": "ok", "claims": [],
         "headline_figure": "missing"},
    ]
    images = parse(write_index(tmp_path, entries, "quick")).images
    assert images == ["a/quick/figures/zeta.png", "b/quick/figures/one.png"]


def test_every_declared_headline_figure_is_one_the_experiment_saves():
    from actlab.runner.experiment import list_experiments

    src = Path(__file__).resolve().parents[1] / "src/actlab"
    source = "".join(p.read_text() for folder in ("experiments", "recipes")
                     for p in sorted((src / folder).rglob("*.py")))
    saved = re.findall(r'save_figure\(fig, f?"([^"]+)"\)', source)
    # drawing functions of a recipe save under a name given as a parameter's default
    saved += [default for args, default in re.findall(
        r'def (draw_\w+)\([^)]*?name: str = "([^"]+)"', source, flags=re.S)]
    patterns = [re.compile(re.sub(r"\\\{[^}]*\\\}", ".+", re.escape(s)) + "$") for s in saved]
    declared = {n: c.headline_figure for n, c in list_experiments().items()
                if c.__module__.startswith("actlab.experiments")}
    assert sum(v is not None for v in declared.values()) >= 15
    for name, figure in declared.items():
        if figure is not None:
            assert any(p.match(figure) for p in patterns), (name, figure)


@pytest.mark.skipif(_chromium() is None, reason="Chromium is not installed")
@pytest.mark.slow
def test_index_renders_headless_with_thumbnails_loaded_and_a_screenshot(reproduced):
    index = reproduced / "index.html"
    images = parse(index).images
    assert images
    _assert_images_load(reproduced, images)
    shot = reproduced / "index.png"
    subprocess.run(
        [_chromium(), "--headless", "--disable-gpu", "--no-sandbox", "--hide-scrollbars",
         "--window-size=1280,900", f"--screenshot={shot}", index.as_uri()],
        capture_output=True, text=True, timeout=60, check=False,
    )
    from PIL import Image

    with Image.open(shot) as image:
        assert image.size == (1280, 900)
        # the first screen is not blank: the overview's thumbnails and text draw on it
        assert len(set(image.convert("L").getdata())) > 20


@pytest.mark.skipif(_chromium() is None, reason="Chromium is not installed")
def test_index_and_report_show_the_reference_column_rendered(tmp_path):
    # A run of a real experiment: every claim row carries its reference value and verdict,
    # and the overview its reference count, as a browser renders them.
    from actlab.runner.references import reference_summary, reference_text
    from actlab.runner.report import write_index

    results = Path(__file__).resolve().parents[1] / "docs" / "results" / "signal"
    claims = json.loads((results / "claims.json").read_text())
    entries = [{"experiment": "signal", "description": "", "report": None, "status": "ok",
                "claims": claims}]
    index = write_index(tmp_path, entries, "quick")
    dom = subprocess.run([_chromium(), "--headless", "--disable-gpu", "--no-sandbox",
                          "--dump-dom", index.as_uri()],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert "at reference scale" in dom
    assert html.escape(reference_summary("signal")) in dom
    for claim in claims:
        assert html.escape(reference_text(claim["id"])) in dom
