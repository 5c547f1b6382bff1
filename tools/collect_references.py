"""Collect reference runs into ``docs/results/`` and the package's ``references.json``.

    python tools/collect_references.py --runs RUNS_ROOT [--name reference] [EXPERIMENT ...]
    python tools/collect_references.py            # only rebuild references.json from docs/results
    python tools/collect_references.py --rejudge [EXPERIMENT ...]  # after a change to claims

For each experiment named (default: every one with a run under ``RUNS_ROOT/<exp>/<name>``)
the run's ``summary.json``, ``claims.json``, ``config.json``, ``env.json`` (with the run's
wall time added: the sum of its units' times) and figures are copied to
``docs/results/<exp>/``; ``metrics.*``, units and reports are not kept.

The run's ``seed_summaries.json`` (every seed summarised alone, written by the runner) is
kept too: the claims are judged over seeds from it, and ``--rejudge`` judges them again
without the units. References kept before it existed have ``claims_per_seed.json`` (each
claim's main value per seed) instead; see :mod:`actlab.runner.rejudge`.

``--full`` keeps an experiment's ``--full`` run beside its reference (``<exp>/full/``; listed
under ``"full"`` in its references entry); ``--evidence`` keeps runs at other settings
(``<exp>/evidence-<name>/``), which never count as the reference.

``references.json`` is then rebuilt from everything under ``docs/results/``: per claim id
its reference value, verdict, seeds, 95 % interval, the seeds an undecided claim would
need and why it is undecided.
Experiments without a reference run are listed as pending with the reason in
:data:`PENDING`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from actlab.runner.atomic import dumps  # noqa: E402
from actlab.runner.claims_figure import draw_claims_figure  # noqa: E402
from actlab.runner.config import build_config  # noqa: E402
from actlab.runner.driver import summarize_seeds  # noqa: E402
from actlab.runner.experiment import RunContext, get_experiment, list_experiments  # noqa: E402
from actlab.runner.references import REFERENCE, REFERENCES_FILE  # noqa: E402
from actlab.runner.rejudge import (  # noqa: E402
    LEGACY_SEED_VALUES,
    SEED_SUMMARIES,
    rejudge_folder,
)

RESULTS = ROOT / "docs" / "results"
KEPT_FILES = ("summary.json", "claims.json", "config.json")
QUICK_CLAIMS = "quick_claims.json"  # every claim of a quick reproduction, by id
QUICK_KEYS = ("value", "held", "measured", "claim", "reference", "source", "source_key", "where",
              "quoted", "predicted", "precondition", "n", "interval", "seeds_needed", "reason",
              "deterministic", "paired", "post_hoc")
VERDICT_KEYS = ("n", "interval", "seeds_needed", "reason", "post_hoc")  # how a verdict over seeds was reached
MAX_TOTAL_BYTES = 15 * 2**20

# Why an experiment has no reference run yet (shown instead of a value).
PENDING: dict[str, tuple[str, str]] = {
    "dit-shift": ("pending (not run yet)",
                  "default scale: 6 units of about 3.7 min of CPU each (3000 steps at 53 ms, "
                  "4 FID checkpoints of 500 guided DDIM samples), about 22 min on one core; "
                  "not run yet"),
    "dit-percentile": ("pending (not run yet)",
                       "default scale: 18 units of about 4 min of CPU each (9 conditions x 2 "
                       "seeds), about 75 min on one core; not run yet"),
}
# Runs beyond the reference scale that are still to do, per experiment (shown until a
# ``--full`` run is collected into docs/results/<experiment>/full/).
EXTRA_PENDING: dict[str, str] = {
    "teacher-student": "--full (50, 200, 20), 8 seeds x 4 activations x 8000 steps: pending",
}
# Kept runs whose claims cannot be judged over seeds until they run again: made before
# per-seed summaries were kept, or with fewer than three seeds. The cost is the CPU time of
# the units (one core each), scaled from the kept run's wall_s to the seeds named.
RERUN: dict[str, str] = {
    "spikes": "default (3 seeds) predates per-seed summaries: re-run, about 6.8 CPU h",
    "gated-ffn": "default (3 seeds) predates per-seed summaries: re-run, about 6.7 CPU h",
    "dit-percentile": "default has 2 seeds and predates per-seed summaries: re-run with 3, "
                      "about 2.5 CPU h (its timed claims want a GPU)",
    "sparse-activations": "default has 2 seeds and predates per-seed summaries: re-run with 3, "
                          "about 3.2 CPU h (evidence-full: 0.6 CPU h)",
    "sparsity": "default has 1 seed: re-run with 3, about 9.2 CPU h",
    "relufy-pretrained": "default has 1 seed: re-run with 3, about 0.66 CPU h",
    "bias-component": "--full has 2 seeds: re-run with 3, about 0.57 CPU h",
    "teacher-student": "--full (8 seeds) and the three evidence sweeps predate per-seed "
                       "summaries: re-run, about 3.0 CPU h for --full",
}
FULL_DIR = "full"  # the --full run kept beside an experiment's default-scale reference
# References measured with settings that are no longer the experiment's defaults: how to
# run them again (shown in the entry as "recipe").
RECIPES: dict[str, str] = {}


def compact_png(path: Path) -> None:
    """Store a kept figure with an adaptive 256-colour palette where that is smaller (plots
    have few colours: about a third of the bytes, no visible change)."""
    from PIL import Image

    with Image.open(path) as image:
        palette = image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    tmp = path.with_suffix(".tmp.png")
    palette.save(tmp, optimize=True)
    if tmp.stat().st_size < path.stat().st_size:
        tmp.replace(path)
    else:
        tmp.unlink()


def resummarize(exp_name: str, run_dir: Path, units: list[dict[str, Any]], dest: Path) -> None:
    """Recompute ``summary.json`` and ``claims.json`` from the run's units with today's
    ``summarize``/``claims`` (figures too): the measured data stay those of the run."""
    experiment = get_experiment(exp_name)
    record = json.loads((run_dir / "config.json").read_text())
    if record["grid"]:
        raise SystemExit(f"{exp_name}: --resummarize handles runs without a grid only")
    config = build_config(type(experiment).Config, record["config"])
    ctx = RunContext(out_dir=dest, figures_dir=dest / "figures")
    summary, claims, by_seed = summarize_seeds(experiment, config, units, ctx)
    draw_claims_figure(claims, ctx)
    claims = [{**claim, "point": ""} for claim in claims]
    (dest / "summary.json").write_text(dumps(summary))
    (dest / "claims.json").write_text(dumps(claims))
    (dest / SEED_SUMMARIES).write_text(dumps(by_seed))


def copy_run(run_dir: Path, dest: Path, exp_name: str, summarize_again: bool = False,
             figures: set[str] | None = None) -> None:
    """Copy one run's kept files and figures to ``dest`` (replacing what was there);
    ``figures``: only the figures of these names (without ``.png``), e.g. for a sweep whose
    every point would otherwise keep every figure."""
    # Replace only what this tool writes: other evidence kept beside a reference stays.
    shutil.rmtree(dest / "figures", ignore_errors=True)
    (dest / "figures").mkdir(parents=True)
    for name in KEPT_FILES:
        shutil.copy2(run_dir / name, dest / name)
    if (run_dir / SEED_SUMMARIES).exists():
        shutil.copy2(run_dir / SEED_SUMMARIES, dest / SEED_SUMMARIES)
        (dest / LEGACY_SEED_VALUES).unlink(missing_ok=True)
    env = json.loads((run_dir / "env.json").read_text())
    units = [json.loads(p.read_text()) for p in sorted((run_dir / "units").glob("*.json"))]
    env["wall_s"] = round(sum(float(u.get("elapsed_s") or 0.0) for u in units), 3)
    env["wall_s_meaning"] = "sum of the units' run times (one worker)"
    env.pop("command", None)  # holds this machine's paths
    (dest / "env.json").write_text(json.dumps(env, indent=1) + "\n")
    for figure in (run_dir / "figures").rglob("*.png"):
        if figures is not None and figure.stem not in figures:
            continue
        target = dest / "figures" / figure.relative_to(run_dir / "figures")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(figure, target)
    if summarize_again:
        resummarize(exp_name, run_dir, units, dest)
        (dest / LEGACY_SEED_VALUES).unlink(missing_ok=True)
        env["summarized_at"] = _head_commit()
        (dest / "env.json").write_text(json.dumps(env, indent=1) + "\n")
    for figure in (dest / "figures").rglob("*.png"):
        compact_png(figure)


def rejudge(exp_name: str) -> list[str]:
    """Judge the kept runs of ``exp_name`` (reference, ``--full``, evidence) again with
    today's claims, over their seeds, and rewrite their ``claims.json``; one line per verdict
    that moved, with the reason."""
    experiment = get_experiment(exp_name)
    moved = []
    for summary_path in sorted((RESULTS / exp_name).rglob("summary.json")):
        folder = summary_path.parent
        old = {(c.get("point", ""), c["id"]): c.get("held")
               for c in json.loads((folder / "claims.json").read_text())}
        claims = rejudge_folder(experiment, folder)
        (folder / "claims.json").write_text(dumps(claims))
        where = folder.relative_to(RESULTS)
        for c in claims:
            before = old.get((c["point"], c["id"]), "new")
            if before != c["held"]:
                why = f" ({c['reason']})" if c.get("reason") else ""
                interval = (f" interval [{c['interval'][0]:.4g}, {c['interval'][1]:.4g}], "
                            f"n={c['n']}" if c.get("interval") else "")
                moved.append(f"{where}: {c['point']} {c['id']}: {before} -> {c['held']}"
                             f"{interval}{why}")
    return moved


def _head_commit() -> str:
    """The commit whose code recomputed a summary."""
    import subprocess

    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout.strip()


def reference_entry(exp_name: str, dest: Path) -> dict[str, Any]:
    """The references.json entry of one collected experiment (with its ``--full`` run under
    ``"full"`` where one is kept)."""
    entry = _run_entry(dest)
    if (dest / FULL_DIR / "claims.json").exists():
        entry["full"] = _run_entry(dest / FULL_DIR)
    elif exp_name in EXTRA_PENDING:
        entry["note"] = EXTRA_PENDING[exp_name]
    if exp_name in RECIPES:
        entry["recipe"] = RECIPES[exp_name]
    if exp_name in RERUN:
        entry["rerun"] = RERUN[exp_name]
    return entry


def _run_entry(dest: Path) -> dict[str, Any]:
    """Scale, seeds, provenance and per-claim value, verdict and seed spread of one kept run."""
    config = json.loads((dest / "config.json").read_text())
    env = json.loads((dest / "env.json").read_text())
    claims = {}
    for claim in json.loads((dest / "claims.json").read_text()):
        claims[claim["id"]] = {
            "value": claim.get("value"),
            "held": claim.get("held"),
            "measured": claim.get("measured", ""),
            **{key: claim.get(key) for key in VERDICT_KEYS},
        }
    entry = {"status": REFERENCE, "scale": config["scale"], "seeds": len(config["seeds"]),
             "commit": env.get("git", {}).get("commit"), "wall_s": env.get("wall_s"),
             "machine": f"{env.get('cpu_count')} CPU cores, {env.get('device')}",
             "claims": claims}
    return entry


def rebuild_references() -> dict[str, Any]:
    """Write references.json from docs/results (every registered experiment gets an entry)."""
    table: dict[str, Any] = {}
    for name in sorted(list_experiments()):
        dest = RESULTS / name
        if (dest / "claims.json").exists():
            table[name] = reference_entry(name, dest)
        else:
            status, note = PENDING.get(name, ("pending (not run yet)",
                                              "no reference run has been committed"))
            table[name] = {"status": status, "note": note, "claims": {}}
    REFERENCES_FILE.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    return table


def collect_quick(root: Path) -> None:
    """Write every claim of a quick reproduction (value, verdict, commit) to QUICK_CLAIMS.

    The experiments found under ``root`` replace their own claims; the claims of the
    others are kept, so a quick run of one new or changed experiment updates just its rows.
    """
    path = RESULTS / QUICK_CLAIMS
    old = json.loads(path.read_text()) if path.exists() else {"commits": [], "claims": {}}
    runs = sorted(root.glob("*/quick/claims.json"))
    replaced = {p.parent.parent.name for p in runs}
    claims = {k: v for k, v in old["claims"].items() if k.split("/", 1)[0] not in replaced}
    commits = set(old["commits"]) if claims else set()
    for run in runs:
        env = json.loads((run.parent / "env.json").read_text())
        commits.add(env.get("git", {}).get("commit"))
        for claim in json.loads(run.read_text()):
            claims[claim["id"]] = {k: claim.get(k) for k in QUICK_KEYS}
    record = {"commits": sorted(c for c in commits if c), "claims": claims}
    path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(f"  quick: {len(claims)} claims ({len(replaced)} experiment(s) replaced)")


def main() -> None:
    """Copy the named runs, rebuild references.json and report the size of docs/results."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("experiments", nargs="*")
    parser.add_argument("--runs", type=Path, help="root folder of the reference runs")
    parser.add_argument("--name", default="reference", help="run name under RUNS/<experiment>/")
    parser.add_argument("--resummarize", action="store_true",
                        help="recompute summary and claims from the runs' units with this "
                             "checkout's code (after a fix to a summary or claim)")
    parser.add_argument("--evidence", action="store_true",
                        help="the runs are evidence beside the reference (another scale or "
                             "setting): copy them to docs/results/<experiment>/evidence-<name>/")
    parser.add_argument("--figures", default="",
                        help="keep only these figures (comma-separated names without .png; "
                             "default: all)")
    parser.add_argument("--full", action="store_true",
                        help="the runs are the experiments' --full runs: copy them to "
                             f"docs/results/<experiment>/{FULL_DIR}/ beside the reference")
    parser.add_argument("--quick", type=Path,
                        help="root of an `actlab reproduce --quick` run: its claims go to "
                             f"docs/results/{QUICK_CLAIMS}")
    parser.add_argument("--rejudge", action="store_true",
                        help="judge the kept summaries of the named experiments (default: all) "
                             "again with today's claims, rewrite their claims.json and list "
                             "every verdict that moved")
    args = parser.parse_args()
    if args.rejudge:
        names = args.experiments or sorted(p.parent.name for p in RESULTS.glob("*/summary.json"))
        for name in names:
            for line in rejudge(name):
                print(f"  moved: {line}")
    if args.quick:
        collect_quick(args.quick)
    if args.runs:
        names = args.experiments or sorted(p.parent.name for p in args.runs.glob(f"*/{args.name}"))
        for name in names:
            run_dir = args.runs / name / args.name
            if not (run_dir / "claims.json").exists():
                print(f"  {name}: no finished run in {run_dir}, skipped")
                continue
            dest = RESULTS / name
            if args.evidence:
                dest = dest / f"evidence-{args.name}"
            elif args.full:
                dest = dest / FULL_DIR
            copy_run(run_dir, dest, name, args.resummarize,
                     set(args.figures.split(",")) if args.figures else None)
            print(f"  {name}: collected into {dest.relative_to(ROOT)}")
    table = rebuild_references()
    size = sum(p.stat().st_size for p in RESULTS.rglob("*") if p.is_file())
    done = sum(e["status"] == REFERENCE for e in table.values())
    print(f"{done}/{len(table)} experiments have a reference; docs/results is {size / 2**20:.1f} MB")
    if size > MAX_TOTAL_BYTES:
        raise SystemExit(f"docs/results is {size / 2**20:.1f} MB, over the 15 MB budget")


if __name__ == "__main__":
    main()
