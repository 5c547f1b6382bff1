"""Tabulate teacher-student runs over Fig. 2's unstated settings, with both Fig. 2 verdicts.

    python tools/ts_settings_table.py [--figure PNG] [RUN_DIR ...]

Reads kept teacher-student runs (default: every ``docs/results/teacher-student/evidence-sweep-*``;
a sweep's points or a single run, e.g. ``.../full``) and prints one markdown table: per
setting (the sweep point, or the run's folder name without ``evidence-``) and activation,
the final losses of the unshifted and shifted students (means over seeds), their ratio
shifted/unshifted (below 1: the shifted student ends lower), the share of seeds the shifted
student wins, and the verdicts of Fig. 2's two claims as the run judged them, each with its
95 % interval over paired seeds: ``shifted-ends-lower`` (final loss, shifted - unshifted)
and ``unshifted-faster-early`` (loss at the early step, unshifted - shifted). Every point of
every run is printed; none is singled out. ``--figure`` also draws the ratios per activation,
marked by the first verdict.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from actlab.runner.plan import point_label
from actlab.runner.references import verdict_text

ROOT = Path(__file__).resolve().parents[1]
EVIDENCE = ROOT / "docs" / "results" / "teacher-student"
CLAIMS = ("shifted-ends-lower", "unshifted-faster-early")  # Fig. 2's two statements
HEADER = ("| setting | activation | final loss unshifted | shifted | ratio | shifted wins | "
          "ends lower (shifted - unshifted) | unshifted faster early |")


def verdict(claim: dict | None) -> str:
    """``held [a, b]``, ``not held [a, b]``, ``undecided [a, b]`` or why there is none."""
    if claim is None:
        return "not judged"
    word = verdict_text(claim["held"])
    interval = claim.get("interval")
    if interval:
        return f"{word} [{interval[0]:.3g}, {interval[1]:.3g}]"
    # the reason's first clause says why there is no interval; its elaboration is in claims.json
    reason = (claim.get("reason") or "").split(":")[0].split(" (")[0]
    return f"{word} ({reason})" if reason else word


def run_label(run_dir: Path) -> str:
    """A run without a grid is one setting, named by its folder (``evidence-`` dropped)."""
    return run_dir.name.removeprefix("evidence-")


def points(run_dir: Path) -> list[tuple[str, dict]]:
    """``(setting label, per-activation summary)`` of each point of a run (one for a run
    without a grid, labelled by :func:`run_label`). A point's label is the runner's own
    (``lr=0.0003,steps=16000``), the one its claims carry."""
    summary = json.loads((run_dir / "summary.json").read_text())
    if "points" not in summary:
        return [(run_label(run_dir), summary)]
    return [(point_label(point["point"]), point["summary"]) for point in summary["points"]]


def claims_by_point(run_dir: Path) -> dict[tuple[str, str], dict]:
    """The run's claims keyed by (setting label, claim id); a run without a grid has one."""
    path = run_dir / "claims.json"
    out = {}
    for claim in json.loads(path.read_text()) if path.exists() else []:
        out[(claim.get("point") or run_label(run_dir), claim["id"])] = claim
    return out


def rows(run_dir: Path) -> list[dict]:
    """One row per (setting, activation) with losses, ratio, wins and both verdicts."""
    claims = claims_by_point(run_dir)
    out = []
    for label, summary in points(run_dir):
        for activation, entry in summary.items():
            if not isinstance(entry, dict) or "final_loss_shifted" not in entry:
                continue
            plain, shifted = entry["final_loss_unshifted"], entry["final_loss_shifted"]
            found = {name: claims.get((label, f"teacher-student/{activation}/{name}"))
                     for name in CLAIMS}
            out.append({"setting": label, "activation": activation, "unshifted": plain,
                        "shifted": shifted,
                        "ratio": shifted / plain if plain else math.nan,
                        "wins": entry["shifted_wins"], "claims": found})
    return out


def setting_key(label: str) -> tuple:
    """Sort ``lr=0.0003,steps=16000`` by field, then numerically by value."""
    key = []
    for part in label.split(","):
        field, _, value = part.partition("=")
        try:
            key.append((field, 0, float(value), ""))
        except ValueError:
            key.append((field, 1, 0.0, value))
    return tuple(key)


def markdown(table: list[dict]) -> str:
    """The rows as a markdown table (HEADER's columns)."""
    lines = [HEADER, "|" + "---|" * HEADER.count(" | ") + "---|"]
    for r in table:
        cells = [r["setting"], r["activation"], f"{r['unshifted']:.4g}", f"{r['shifted']:.4g}",
                 f"{r['ratio']:.4f}", f"{r['wins']:.3g}",
                 *(verdict(r["claims"][name]) for name in CLAIMS)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def draw(table: list[dict], path: Path) -> None:
    """Ratio shifted/unshifted per setting on a log axis, one panel per activation; the marker
    says the ``shifted-ends-lower`` verdict (filled: held, cross: not held, open: undecided)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, NullFormatter

    activations = list(dict.fromkeys(r["activation"] for r in table))
    fig, axes = plt.subplots(1, len(activations), figsize=(3.2 * len(activations), 3.4),
                             sharey=False, squeeze=False)
    for ax, activation in zip(axes[0], activations):
        mine = [r for r in table if r["activation"] == activation]
        for x, r in enumerate(mine):
            held = (r["claims"]["shifted-ends-lower"] or {}).get("held")
            style = {True: dict(marker="o", color="C2"), False: dict(marker="x", color="C3"),
                     None: dict(marker="o", mfc="none", color="C0")}[held]
            ax.plot([x], [r["ratio"]], linestyle="none", markersize=7, **style)
        ax.axhline(1.0, color="grey", linewidth=0.8)
        # a log axis: a ratio of 16 (sigmoid at lr 3e-3) would otherwise flatten one of 0.4
        ax.set_yscale("log")
        plain = FuncFormatter(lambda value, _: f"{value:g}")
        ax.yaxis.set_major_formatter(plain)
        low, high = ax.get_ylim()
        # within a decade the minor ticks are the only ones, so they carry the labels
        ax.yaxis.set_minor_formatter(plain if high / low < 10 else NullFormatter())
        ax.set_xticks(range(len(mine)), [r["setting"] for r in mine], rotation=60,
                      ha="right", fontsize=7)
        ax.set_title(activation)
    axes[0][0].set_ylabel("final loss shifted / unshifted")
    fig.suptitle("below 1: shifted ends lower (filled: held, x: not held, open: undecided)",
                 fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    """Print the table for the given run folders (default: every evidence-sweep-*)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", type=Path, help="kept teacher-student run folders")
    parser.add_argument("--figure", type=Path, help="also draw the ratios into this PNG")
    args = parser.parse_args(argv)
    dirs = args.runs or sorted(EVIDENCE.glob("evidence-sweep-*"))
    if not dirs:
        print("no runs found (expected docs/results/teacher-student/evidence-sweep-*)",
              file=sys.stderr)
        return 2
    for run_dir in dirs:
        if not (run_dir / "summary.json").is_file():
            print(f"{run_dir}: not a kept run (no summary.json)", file=sys.stderr)
            return 2
    table = [row for d in dirs for row in rows(d)]
    table.sort(key=lambda r: (setting_key(r["setting"]), r["activation"]))
    print(markdown(table))
    if args.figure:
        draw(table, args.figure)
    return 0


if __name__ == "__main__":
    sys.exit(main())
