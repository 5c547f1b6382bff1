"""List the verdicts that moved between a base commit and the working tree.

    python tools/verdict_changes.py --base COMMIT [--markdown]

Compares the reference verdicts of ``src/actlab/runner/references.json`` (default scale and
``--full``) and the quick verdicts of ``docs/results/quick_claims.json`` at ``COMMIT`` with
today's files, one line per claim whose verdict changed (or that appeared or went), with the
reason an undecided claim gives and the interval it rests on. Counts per experiment last.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
REFERENCES = "src/actlab/runner/references.json"
QUICK = "docs/results/quick_claims.json"


def _at(commit: str, path: str) -> Any:
    text = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout
    return json.loads(text)


def _verdict(held: Any) -> str:
    return {True: "held", False: "not held", None: "undecided"}.get(held, str(held))


def _tables(references: dict[str, Any], quick: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{scale: {claim id: claim}}`` for the reference, ``--full`` and quick verdicts."""
    out: dict[str, dict[str, Any]] = {"reference": {}, "full": {}, "quick": quick["claims"]}
    for entry in references.values():
        out["reference"].update(entry.get("claims", {}))
        out["full"].update(entry.get("full", {}).get("claims", {}))
    return out


def changes(base: str) -> list[tuple[str, str, str, str, str]]:
    """``(scale, claim id, before, after, why)`` for every verdict that moved since ``base``."""
    before = _tables(_at(base, REFERENCES), _at(base, QUICK))
    after = _tables(json.loads((ROOT / REFERENCES).read_text()),
                    json.loads((ROOT / QUICK).read_text()))
    rows = []
    for scale in ("quick", "reference", "full"):
        old, new = before[scale], after[scale]
        for claim_id in sorted(set(old) | set(new)):
            was = _verdict(old[claim_id]["held"]) if claim_id in old else "absent"
            now = _verdict(new[claim_id]["held"]) if claim_id in new else "removed"
            if was == now:
                continue
            claim = new.get(claim_id, {})
            interval = claim.get("interval")
            why = (f"n={claim.get('n')}, 95 % CI [{interval[0]:.3g}, {interval[1]:.3g}]"
                   if interval else (f"n={claim.get('n')}" if claim.get("n") else ""))
            if claim.get("held") is None and claim.get("reason"):
                why = f"{why}; {claim['reason']}" if why else claim["reason"]
            rows.append((scale, claim_id, was, now, why))
    return rows


def main() -> None:
    """Print the moved verdicts (a Markdown table with ``--markdown``) and their counts."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the commit to compare with")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = parser.parse_args()
    try:
        rows = changes(args.base)
    except subprocess.CalledProcessError as exc:
        parser.error(f"--base {args.base}: {exc.stderr.strip().splitlines()[-1]}")
    if args.markdown:
        print("| scale | claim | before | after | over seeds |")
        print("|---|---|---|---|---|")
        for row in rows:
            print("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |")
    else:
        for scale, claim_id, was, now, why in rows:
            print(f"{scale:9s} {claim_id}: {was} -> {now}{'  (' + why + ')' if why else ''}")
    counts = Counter((scale, f"{was} -> {now}") for scale, _, was, now, _ in rows)
    print()
    for (scale, move), count in sorted(counts.items()):
        print(f"{scale:9s} {move}: {count}")


if __name__ == "__main__":
    main()
