"""HTML reports: ``report.html`` of one run directory and ``index.html`` of ``reproduce``.

Both are self-contained in their folder: every link and image is a relative path to a
file inside it, so the folder can be moved, zipped or served as is.
"""

from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Any
from urllib.parse import quote

from actlab.runner.atomic import atomic_write_text, read_json
from actlab.runner.execute import error_headline
from actlab.runner.experiment import METRIC_COLUMNS
from actlab.runner.references import reference_held, reference_summary, reference_text
from actlab.runner.sinks import flatten

MAX_FINAL_ROWS = 300

_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:0.5em 0 1.5em;display:block;max-width:100%;
overflow-x:auto}th,td{border:1px solid #ccc;padding:3px 8px;
text-align:left;vertical-align:top;font-size:0.9em;overflow-wrap:anywhere}th{background:#f3f3f3}
td.num{text-align:right;font-family:monospace}.bad{color:#b00020}.good{color:#0a7d28}
.undecided{color:#8a6d00}figure{display:inline-block;margin:0.5em;max-width:100%}
figure img{max-width:100%;border:1px solid #ddd}pre{background:#f7f7f7;padding:0.5em;overflow:auto;
font-size:0.8em}code{font-size:0.9em}
.overview td{vertical-align:middle}.overview img.thumb{height:110px;max-width:220px;
border:1px solid #ddd;display:block}details>summary{cursor:pointer;font-weight:600;margin:0.5em 0}
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _href(path: str) -> str:
    return quote(path, safe="/")


def format_value(value: Any) -> str:
    """Short text of a summary value (floats with 6 significant digits)."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, float):
        return f"{value:.6g}" if math.isfinite(value) else str(value)
    if isinstance(value, list):
        text = "[" + ", ".join(format_value(v) for v in value[:20]) + (", …" if len(value) > 20 else "") + "]"
        return text
    return str(value)


def held_text(held: Any) -> str:
    """``yes``/``no``/``undecided`` for a claim's ``held`` field."""
    return {True: "yes", False: "no"}.get(held, "undecided")


def judged_text(claim: dict[str, Any]) -> str:
    """A claim's value and how it is judged, e.g. ``0.0123 < 0.0456`` (``""`` without a value)."""
    value = claim.get("value")
    if value is None:
        return ""
    text, comparison = format_value(float(value)), claim.get("comparison", "")
    threshold, reference = claim.get("threshold"), claim.get("reference")
    if comparison == "within" and threshold is not None and reference is not None:
        return f"{text} within {format_value(float(threshold))} of {format_value(float(reference))}"
    if comparison == "within-factor" and threshold is not None and reference is not None:
        return (f"{text} within {format_value(float(threshold))}x of "
                f"{format_value(float(reference))}")
    if comparison in ("<", "<=", ">", ">=") and threshold is not None:
        return f"{text} {comparison} {format_value(float(threshold))}"
    return text


def _held_class(held: Any) -> str:
    return {True: "good", False: "bad"}.get(held, "undecided")


def seeds_text(claim: dict[str, Any]) -> str:
    """What the verdict rests on: ``"n=3, 95 % CI [-0.1, -0.02] of value - bar"``, the reason
    of an undecided claim, or ``"deterministic"``."""
    if claim.get("deterministic"):
        return "deterministic (judged on its value)"
    parts = []
    if claim.get("n") is not None:
        parts.append(f"n={claim['n']}")
    interval = claim.get("interval")
    if interval:
        parts.append(f"95 % CI [{interval[0]:.3g}, {interval[1]:.3g}]")
    if claim.get("held") is None and claim.get("reason"):
        parts.append(str(claim["reason"]))
    return ", ".join(parts)


def _table(headers: list[str], rows: list[list[str]], raw: bool = False) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = "".join(f"<td>{c if raw else _e(c)}</td>" for c in row)
        body.append(f"<tr>{cells}</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _key_value_table(mapping: dict[str, Any]) -> str:
    flat = flatten(mapping) if mapping else {}
    return _table(["key", "value"], [[k, format_value(v)] for k, v in flat.items()])


def _claims_table(claims: list[dict[str, Any]], with_experiment: bool = False) -> str:
    headers = (["experiment"] if with_experiment else []) + ["id", "claim", "measured", "value",
                                                             "held", "over seeds",
                                                             "at reference scale", "source"]
    if any(c.get("point") for c in claims):
        headers.insert(1 if with_experiment else 0, "grid point")
    rows = []
    for claim in claims:
        cells = []
        if with_experiment:
            link = claim.get("report")
            name = _e(claim.get("experiment", ""))
            cells.append(f'<a href="{_href(link)}">{name}</a>' if link else name)
        if "grid point" in headers:
            cells.append(_e(claim.get("point", "")))
        held, claim_id = claim.get("held"), str(claim.get("id", ""))
        cells += [
            _e(claim.get("id", "")),
            _e(claim.get("claim", "")),
            _e(claim.get("measured", "")),
            _e(judged_text(claim)),
            f'<span class="{_held_class(held)}">{held_text(held)}</span>',
            _e(seeds_text(claim)),
            f'<span class="{_held_class(reference_held(claim_id))}">'
            f'{_e(reference_text(claim_id))}</span>',
            _e(claim.get("source", "")),
        ]
        rows.append(cells)
    return _table(headers, rows, raw=True)


def _final_values(run_dir: Path) -> str:
    """Table of each (run, layer, metric) at its last step: mean, sd and count over seeds."""
    path = run_dir / "metrics.csv"
    if not path.exists():
        return "<p>No metrics table.</p>"
    import pandas as pd

    try:
        frame = pd.read_csv(
            path, dtype={"run": str, "layer": str, "metric": str, "value": str},
            keep_default_na=False,
        )
        if frame.empty:
            return "<p>The metrics table is empty.</p>"
        missing = [c for c in METRIC_COLUMNS if c not in frame.columns]
        if missing:
            raise ValueError(f"no column {', '.join(missing)}")
        frame["value"] = frame["value"].astype(float)
        frame["step"] = frame["step"].astype("int64")
    except (ValueError, pd.errors.ParserError) as exc:
        raise ValueError(f"{path}: not a readable metrics table ({exc}): the file is truncated "
                         "or was edited; `actlab run ... --resume` rewrites it from the unit "
                         "records") from None
    keys = ["run", "layer", "metric"]
    last_step = frame.groupby(keys, sort=True)["step"].transform("max")
    final = frame[frame["step"] == last_step]
    grouped = final.groupby(keys, sort=True).agg(
        step=("step", "max"), mean=("value", "mean"), sd=("value", "std"), n=("value", "size")
    )
    rows = []
    for (run, layer, metric), item in grouped.head(MAX_FINAL_ROWS).iterrows():
        sd = "" if item["n"] < 2 else format_value(float(item["sd"]))
        rows.append([run, layer, metric, str(int(item["step"])), format_value(float(item["mean"])), sd,
                     str(int(item["n"]))])
    note = ""
    if len(grouped) > MAX_FINAL_ROWS:
        note = f"<p>First {MAX_FINAL_ROWS} of {len(grouped)} rows; see metrics.csv.</p>"
    return _table(["run", "layer", "metric", "last step", "mean", "sd", "seeds"], rows) + note


def _figures(run_dir: Path) -> str:
    figures = sorted((run_dir / "figures").rglob("*.png")) if (run_dir / "figures").exists() else []
    if not figures:
        return "<p>No figures.</p>"
    parts = []
    for figure in figures:
        rel = figure.relative_to(run_dir).as_posix()
        caption = figure.relative_to(run_dir / "figures").with_suffix("").as_posix()
        parts.append(  # a click opens the figure at full size
            f'<figure><a href="{_href(rel)}"><img src="{_href(rel)}" alt="{_e(caption)}"></a>'
            f"<figcaption>{_e(caption)} (click for full size)</figcaption></figure>"
        )
    return "\n".join(parts)


def _units(run_dir: Path) -> str:
    units_dir = run_dir / "units"
    records = []
    for path in sorted(units_dir.glob("*.json")) if units_dir.exists() else []:
        try:
            records.append(read_json(path))
        except (OSError, ValueError):
            continue
    counts: dict[str, int] = {}
    for record in records:
        counts[record.get("status", "?")] = counts.get(record.get("status", "?"), 0) + 1
    text = "<p>" + ", ".join(f"{_e(k)}: {v}" for k, v in sorted(counts.items())) + "</p>"
    bad = [r for r in records if r.get("status") != "ok"]
    if not bad:
        return text + "<p>No failed or diverged units.</p>"
    rows = []
    for record in sorted(bad, key=lambda r: (r.get("status", ""), r.get("id", ""))):
        error = record.get("error") or ""
        detail = f"<details><summary>{_e(error_headline(error))}</summary><pre>{_e(error)}</pre></details>"
        rows.append([
            _e(record.get("status")), f"<code>{_e(record.get('id'))}</code>",
            _e(record.get("point") or ""), _e(record.get("unit")), _e(record.get("seeds")), detail,
        ])
    return text + _table(["status", "unit id", "grid point", "unit", "seeds", "error"], rows, raw=True)


def _links(run_dir: Path, names: list[str]) -> str:
    present = [n for n in names if (run_dir / n).exists()]
    return " · ".join(f'<a href="{_href(n)}">{_e(n)}</a>' for n in present)


def _page(title: str, body: str) -> str:
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>\n{body}\n</body></html>\n"
    )


def _summary_section(summary: Any) -> str:
    if summary is None:
        return "<p>No summary.</p>"
    if isinstance(summary, dict) and set(summary) == {"points"}:
        parts = []
        for entry in summary["points"]:
            label = ",".join(f"{k}={v}" for k, v in entry.get("point", {}).items())
            parts.append(f"<h3>{_e(label)}</h3>" + _key_value_table(entry.get("summary") or {}))
        return "".join(parts)
    return _key_value_table(summary) if isinstance(summary, dict) else f"<pre>{_e(summary)}</pre>"


def _folded(title: str, body: str) -> str:
    """A section closed by default: its heading is the ``<summary>`` of a ``<details>``."""
    return f"<details><summary><h2 style=\"display:inline\">{_e(title)}</h2></summary>{body}</details>"


def write_report(run_dir: str | Path) -> Path:
    """(Re)write ``report.html`` of a run directory from the files in it."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.json").exists():
        raise FileNotFoundError(f"{run_dir} is not a run directory (no config.json)")
    config = read_json(run_dir / "config.json")
    env = read_json(run_dir / "env.json") if (run_dir / "env.json").exists() else {}
    status = read_json(run_dir / "status.json") if (run_dir / "status.json").exists() else {}
    summary = read_json(run_dir / "summary.json") if (run_dir / "summary.json").exists() else None
    claims = read_json(run_dir / "claims.json") if (run_dir / "claims.json").exists() else []
    title = f"{config.get('experiment', '?')} / {config.get('name', run_dir.name)}"
    parts = [f"<h1>{_e(title)}</h1>"]
    if status.get("description"):
        parts.append(f"<p>{_e(status['description'])}</p>")
    parts.append(
        f"<p>Scale <b>{_e(config.get('scale'))}</b>, seeds {_e(config.get('seeds'))}. Files: "
        + _links(run_dir, ["metrics.csv", "metrics.parquet", "summary.json", "claims.json",
                           "config.json", "env.json", "status.json"])
        + "</p>"
    )
    if status.get("summary_error"):  # one line; the traceback stays in status.json
        parts.append(
            f'<p class="bad">summarize failed: {_e(error_headline(status["summary_error"]))} '
            "(the traceback is in status.json)</p>"
        )
    if status.get("failed"):
        parts.append(f'<p class="bad">{len(status["failed"])} unit(s) failed.</p>')
    # what people look at first: figures, then what they show (claims); the long tables fold
    parts += ["<h2>Figures</h2>", _figures(run_dir)]
    parts += ["<h2>Claims</h2>", f"<p>{_e(origin_counts(claims))}</p>" if claims else "",
              _claims_table(claims) if claims else "<p>No claims.</p>"]
    parts += [_folded("Summary", _summary_section(summary))]
    parts += ["<h2>Units</h2>", _units(run_dir)]
    parts += [_folded("Final values", _final_values(run_dir))]
    config_part = config.get("config")
    if config_part is None:
        config_part = {",".join(f"{k}={v}" for k, v in p["point"].items()): p["config"]
                       for p in config.get("points", [])}
    parts += [_folded("Config", _key_value_table(config_part))]
    parts += [_folded("Environment", _key_value_table(env))]
    path = run_dir / "report.html"
    atomic_write_text(path, _page(title, "\n".join(parts)))
    return path


def headline_figure(out_dir: Path, entry: dict[str, Any]) -> str | None:
    """Path (relative to ``out_dir``) of an experiment's headline figure, if it was drawn.

    The figure is the one the experiment class declares in ``headline_figure`` (or
    ``entry["headline_figure"]``); without a declaration, or if that file is missing, the
    first figure of the run.
    """
    if not entry.get("report"):
        return None
    figures = (out_dir / entry["report"]).parent / "figures"
    name = (entry["headline_figure"] if "headline_figure" in entry
            else _declared_headline(entry["experiment"]))
    chosen = figures / f"{name}.png" if name else None
    if chosen is None or not chosen.is_file():
        found = sorted(figures.rglob("*.png")) if figures.is_dir() else []
        chosen = found[0] if found else None
    return chosen.relative_to(out_dir).as_posix() if chosen is not None else None


def _declared_headline(experiment: str) -> str | None:
    from actlab.runner.experiment import list_experiments

    return getattr(list_experiments().get(experiment), "headline_figure", None)


def _overview_row(out_dir: Path, entry: dict[str, Any]) -> list[str]:
    name = _e(entry["experiment"])
    link = f'<a href="{_href(entry["report"])}">{name}</a>' if entry.get("report") else name
    state = entry["status"]
    css = "good" if state == "ok" else "bad"
    figure = headline_figure(out_dir, entry)
    thumb = ""
    if figure:
        thumb = (f'<a href="{_href(figure)}"><img class="thumb" src="{_href(figure)}" '
                 f'alt="{name} headline figure" loading="lazy"></a>')
    held = [c.get("held") for c in entry.get("claims", [])]
    counts = [f'<span class="good">{held.count(True)}</span>',
              f'<span class="bad">{held.count(False)}</span>',
              f'<span class="undecided">{held.count(None)}</span>'] if held else ["", "", ""]
    problems = "<br>".join(_e(p) for p in entry.get("problems", []))
    description = _e(entry.get("description", ""))
    return [f"<b>{link}</b><br>{description}", thumb, *counts,
            _e(reference_summary(entry["experiment"])),
            f'<span class="{css}">{_e(state)}</span>', problems]


def origin_counts(claims: list[dict[str, Any]]) -> str:
    """The papers' claims and ours counted apart: ``"The documents' claims: ...; ours: ..."``.

    A claim is ours when its source is :data:`actlab.runner.sources.OURS`; claims written
    before sources had keys count as the documents'.
    """
    from actlab.runner.sources import OURS

    def tally(rows: list[dict[str, Any]]) -> str:
        held = [c.get("held") for c in rows]
        return (f"{len(rows)} ({held.count(True)} held, {held.count(False)} not held, "
                f"{held.count(None)} undecided)")

    ours = [c for c in claims if c.get("source_key") == OURS]
    papers = [c for c in claims if c.get("source_key") != OURS]
    return f"The documents' claims: {tally(papers)}; ours: {tally(ours)}."


def write_index(out_dir: str | Path, entries: list[dict[str, Any]], scale: str) -> Path:
    """Write ``out_dir/index.html``: an overview (per experiment its claim counts and a
    thumbnail of its headline figure), then every claim.

    Each entry has ``experiment``, ``description``, ``report`` (path relative to ``out_dir``
    or None), ``status`` (``ok``/``failed``), ``problems`` (lines) and ``claims`` (dicts);
    optionally ``headline_figure`` (else the experiment class's declaration is used).
    """
    out_dir = Path(out_dir)
    all_claims = [{**claim, "experiment": entry["experiment"], "report": entry.get("report")}
                  for entry in entries for claim in entry.get("claims", [])]
    held = [c.get("held") for c in all_claims]
    failed = [e for e in entries if e["status"] != "ok"]
    parts = [f"<h1>actlab reproduction ({_e(scale)})</h1>"]
    parts.append(f"<p>{len(entries)} experiments; claims held {held.count(True)}, not held "
                 f"{held.count(False)}, undecided {held.count(None)}. {_e(origin_counts(all_claims))}"
                 "</p>")
    if failed:
        parts.append('<p class="bad">Failed: ' + ", ".join(_e(e["experiment"]) for e in failed) + "</p>")
    overview = _table(["experiment", "headline figure", "held", "not held", "undecided",
                       "at reference scale", "status", "problems"], [_overview_row(out_dir, e) for e in entries], raw=True)
    parts += ["<h2>Overview</h2>", overview.replace("<table>", '<table class="overview">', 1)]
    parts += ["<h2>Claims</h2>",
              _claims_table(all_claims, with_experiment=True) if all_claims else "<p>No claims.</p>"]
    path = out_dir / "index.html"
    atomic_write_text(path, _page("actlab reproduction", "\n".join(parts)))
    return path
