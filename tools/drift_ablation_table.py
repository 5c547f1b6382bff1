"""Print the real-data drift ablation: what turns the digits drift negative.

    python tools/drift_ablation_table.py [EVIDENCE_DIR ...]

Reads the drift runs kept as evidence (``docs/results/drift/evidence-ablation-*``, each an
``actlab sweep drift --set conditions=digits --grid FIELD=...`` run changing one difference
between our digits arm and App. D.2's CIFAR-10 MLP, and ``evidence-d2-digits``, all of them
at once) and prints one markdown table: per point, the ReLU MLP's mean weight shift of the
hidden layers 2..6 at the end with its 95 % t-interval over seeds and every seed's value,
the same shift at the first weight record after the training set is fitted (training loss
below 1 % of its first value; "not fitted" where no seed got there), and the sparsity at
the start and the end. Every point is printed; none is singled out.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from actlab.runner.verdicts import t_interval

ROOT = Path(__file__).resolve().parents[1]
EVIDENCE = ROOT / "docs" / "results" / "drift"
CONDITIONS = ("digits", "digits-default-init")


def _interval(values: list[float]) -> str:
    """``mean [low, high]`` of the seeds' values (the mean alone for one seed)."""
    interval = t_interval(values)
    if interval is None:
        return f"{values[0]:+.2e}" if values else "-"
    return f"{interval.mean:+.2e} [{interval.low:+.1e}, {interval.high:+.1e}]"


def rows(run_dir: Path) -> list[list[str]]:
    """Table rows of one kept run: its setting, then per real-data condition the drift at
    the end (interval, seeds), at the fit, and the sparsity."""
    seeds = json.loads((run_dir / "seed_summaries.json").read_text())
    points = seeds["points"] if "points" in seeds else [dict(seeds, point={})]
    name = run_dir.name.removeprefix("evidence-")
    out = []
    for point in points:
        setting = ", ".join(f"{k}={v}" for k, v in point["point"].items()) or "App. D.2 on digits"
        for cond in CONDITIONS:
            entries = [s["activations"]["relu"][cond] for s in point["summaries"]
                       if cond in s["activations"].get("relu", {})]
            if not entries:
                continue
            final = [e["mean_shift_later_layers"] for e in entries]
            fit = [e["mean_shift_at_fit"] for e in entries if e.get("mean_shift_at_fit") is not None]
            start = sum(e["sparsity_start"] for e in entries) / len(entries)
            end = sum(e["sparsity_end"] for e in entries) / len(entries)
            out.append([name, setting, cond, _interval(final),
                        " ".join(f"{v:+.1e}" for v in final),
                        _interval(fit) if fit else "not fitted", f"{start:.2f} -> {end:.2f}"])
    return out


def main(argv: list[str] | None = None) -> None:
    """Print the table for the evidence folders in ``argv`` (default: the command line's;
    none: the ablation and D.2)."""
    args = sys.argv[1:] if argv is None else argv
    dirs = [Path(a) for a in args] or (sorted(EVIDENCE.glob("evidence-ablation-*"))
                                               + sorted(EVIDENCE.glob("evidence-d2-digits")))
    if not dirs:
        raise SystemExit("no ablation runs found (expected docs/results/drift/evidence-ablation-*)")
    for d in dirs:
        if not (d / "seed_summaries.json").is_file():
            print(f"{d}: no seed_summaries.json (not a kept drift run)", file=sys.stderr)
            raise SystemExit(2)
    print("| run | setting | condition | hidden-layer shift, end (95 % CI) | per seed "
          "| shift at the fit | sparsity |")
    print("|---|---|---|---|---|---|---|")
    for d in dirs:
        for row in rows(d):
            print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
