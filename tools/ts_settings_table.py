"""Print the teacher-student final-loss ratio over the sweeps of Fig. 2's unstated settings.

    python tools/ts_settings_table.py [EVIDENCE_DIR ...]

Reads sweep runs kept as evidence (``docs/results/teacher-student/evidence-sweep-*``, each an
``actlab sweep teacher-student --grid FIELD=...`` run) and prints one markdown table: per
swept field and value, per activation, the final losses of the unshifted and shifted
students (means over seeds), their ratio shifted/unshifted (below 1: the shifted student ends
lower) and the share of seeds the shifted student wins. Every point of every sweep is
printed; none is singled out.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EVIDENCE = ROOT / "docs" / "results" / "teacher-student"


def rows(run_dir: Path) -> list[list[str]]:
    """Table rows of one sweep run: field, value, activation, losses, ratio, wins."""
    summary = json.loads((run_dir / "summary.json").read_text())
    out = []
    for point in summary["points"]:
        (field, value), = point["point"].items()
        for activation, entry in point["summary"].items():
            if not isinstance(entry, dict) or "final_loss_shifted" not in entry:
                continue
            plain, shifted = entry["final_loss_unshifted"], entry["final_loss_shifted"]
            ratio = shifted / plain if plain else float("nan")
            out.append([field, value, activation, f"{plain:.4g}", f"{shifted:.4g}",
                        f"{ratio:.4f}", f"{entry['shifted_wins']:.3g}"])
    return out


def main() -> None:
    """Print the table for the given evidence folders (default: every evidence-sweep-*)."""
    dirs = [Path(a) for a in sys.argv[1:]] or sorted(EVIDENCE.glob("evidence-sweep-*"))
    if not dirs:
        raise SystemExit("no sweep runs found (expected docs/results/teacher-student/"
                         "evidence-sweep-*)")
    print("| field | value | activation | final loss unshifted | shifted | ratio | shifted wins |")
    print("|---|---|---|---|---|---|---|")
    table = [row for d in dirs for row in rows(d)]
    table.sort(key=lambda r: (r[0], float(r[1]), r[2]))
    for row in table:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
