"""Run every command and snippet of README.md as a newcomer would after ``make demo``.

    python tools/readme_commands.py [--list] [--skip-benchmarks]

Each ``bash`` block's lines run one by one in the repository root with ``.venv/bin`` first on
``PATH`` (as ``source .venv/bin/activate`` leaves it, which the README asks for); each
``python`` block runs whole as a script with the venv's Python. ``make demo`` and ``make
test`` are the README's entry points, run before this script (``.ci/run``), so they are
skipped here. A trailing comment after two spaces is dropped. Every command must exit 0; the
first that does not stops the script with its output and exit 1. ``--list`` prints what
would run.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
ENTRY_POINTS = ("make demo", "make test")  # run before this script
FENCE = re.compile(r"^```(\w*)\s*$")
COMMENT = re.compile(r"\s{2,}#.*$")
TIMEOUT_S = 1800


def blocks(text: str) -> list[tuple[str, str]]:
    """``(language, body)`` of every fenced code block of ``text``, in order."""
    out, language, lines = [], None, []
    for line in text.splitlines():
        match = FENCE.match(line)
        if match and language is None:
            language, lines = match.group(1), []
        elif line.startswith("```") and language is not None:
            out.append((language, "\n".join(lines)))
            language = None
        elif language is not None:
            lines.append(line)
    return out


def commands(text: str, skip_benchmarks: bool = False) -> list[tuple[str, str]]:
    """``("bash", line)`` and ``("python", script)`` to run, in README order."""
    out = []
    for language, body in blocks(text):
        if language == "python":
            out.append(("python", body))
        elif language in ("bash", "sh", "shell"):
            for line in body.splitlines():
                line = COMMENT.sub("", line).strip()
                if not line or line.startswith("#") or line in ENTRY_POINTS:
                    continue
                if skip_benchmarks and "benchmarks/" in line:
                    continue
                out.append(("bash", line))
    return out


def run(kind: str, command: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """One README command in the repository root."""
    if kind == "bash":
        return subprocess.run(["bash", "-c", command], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=TIMEOUT_S)
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as handle:
        handle.write(command)
    try:
        return subprocess.run([str(ROOT / ".venv" / "bin" / "python"), handle.name], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    finally:
        os.unlink(handle.name)


def main() -> int:
    """Run the README's commands; 0 when all exit 0."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="print the commands, run nothing")
    parser.add_argument("--skip-benchmarks", action="store_true",
                        help="leave out the benchmarks/ lines (minutes each)")
    args = parser.parse_args()
    todo = commands(README.read_text(encoding="utf-8"), args.skip_benchmarks)
    if args.list:
        for kind, command in todo:
            more = " ..." if len(command.splitlines()) > 1 else ""
            print(f"[{kind}] {command.splitlines()[0]}{more}")
        return 0
    venv = ROOT / ".venv" / "bin"
    if not (venv / "actlab").exists():
        print("error: no .venv/bin/actlab: run `make demo` first", file=sys.stderr)
        return 2
    env = {**os.environ, "PATH": f"{venv}{os.pathsep}{os.environ.get('PATH', '')}",
           "MPLBACKEND": "Agg", "VIRTUAL_ENV": str(venv.parent)}
    for i, (kind, command) in enumerate(todo, 1):
        started = time.monotonic()
        head = command.splitlines()[0]
        print(f"[{i}/{len(todo)}] {kind}: {head}", flush=True)
        result = run(kind, command, env)
        print(f"    exit {result.returncode} in {time.monotonic() - started:.0f} s", flush=True)
        if result.returncode != 0:
            print(result.stdout[-4000:], result.stderr[-4000:], sep="\n", file=sys.stderr)
            print(f"error: README command {i} failed: {head}", file=sys.stderr)
            return 1
    print(f"all {len(todo)} README commands and snippets ran", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
