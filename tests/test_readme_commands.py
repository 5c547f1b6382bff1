"""tools/readme_commands.py, which CI runs after ``make demo``: it finds every command and
snippet of the README, and every ``actlab`` command the README shows is a real command."""

from __future__ import annotations

import importlib.util
import shlex
from pathlib import Path

from click.testing import CliRunner

from actlab.cli import main

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("readme_commands", ROOT / "tools" / "readme_commands.py")
readme_commands = importlib.util.module_from_spec(spec)
spec.loader.exec_module(readme_commands)


def test_commands_are_read_from_bash_and_python_blocks_in_order():
    text = "\n".join([
        "intro", "```bash", "make demo   # the entry point", "actlab list   # names", "",
        "# a comment line", "actlab info relu", "```", "```json", '{"a": 1}', "```",
        "```python", "import actlab", "print(actlab)", "```"])
    assert readme_commands.commands(text) == [
        ("bash", "actlab list"), ("bash", "actlab info relu"),
        ("python", "import actlab\nprint(actlab)")]
    bench = "```bash\n.venv/bin/python benchmarks/x.py   # slow\nactlab list\n```"
    assert readme_commands.commands(bench, skip_benchmarks=True) == [("bash", "actlab list")]


def test_every_actlab_command_of_the_readme_exists_and_takes_its_options():
    todo = readme_commands.commands(readme_commands.README.read_text(encoding="utf-8"))
    lines = [c for kind, c in todo if kind == "bash" and c.startswith("actlab ")]
    assert len(lines) >= 10
    for line in lines:
        words = shlex.split(line)
        sub = words[1]
        result = CliRunner().invoke(main, [sub, "--help"])
        assert result.exit_code == 0, line
        for option in (w.split("=")[0] for w in words[2:] if w.startswith("--")):
            assert option in result.output, f"{line}: {option} not in `actlab {sub} --help`"
    scripts = [c for kind, c in todo if kind == "bash" and "benchmarks/" in c]
    for line in scripts:
        assert (ROOT / shlex.split(line)[1]).is_file(), line
