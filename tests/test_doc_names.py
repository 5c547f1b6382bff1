"""Every public name README.md and docs/*.md show in code resolves.

The code is read from fenced blocks and inline code spans: ``from actlab.X import a, b``
(each name, parenthesised lists across lines too) and dotted names ``actlab.X.Y`` (imported
as far as they are modules, then read as attributes). A name whose module needs an optional
package that is not installed is skipped, not failed.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCED = re.compile(r"^\s*(`{3,}|~{3,})[^\n]*\n(.*?)^\s*\1", re.DOTALL | re.MULTILINE)
INLINE = re.compile(r"(`+)([^`\n]+?)\1")
FROM_IMPORT = re.compile(r"\bfrom\s+(actlab(?:\.\w+)*)\s+import\s+(\([^)]*\)|[^\n#;]*)")
DOTTED = re.compile(r"(?<![\w.])actlab(?:\.[A-Za-z_]\w*)+")


def code_snippets(text: str) -> list[str]:
    """The fenced blocks and the inline code spans of a Markdown text."""
    blocks = [m.group(2) for m in FENCED.finditer(text)]
    prose = FENCED.sub("", text)
    return blocks + [m.group(2) for m in INLINE.finditer(prose)]


def names_in(snippet: str) -> set[str]:
    """Dotted ``actlab`` names a code snippet imports or mentions."""
    found = set()
    for match in FROM_IMPORT.finditer(snippet):
        for item in match.group(2).strip("() \n").replace("\n", " ").split(","):
            name = item.split(" as ")[0].strip()
            if name.isidentifier():
                found.add(f"{match.group(1)}.{name}")
    # The module of a from-import is already counted through its names.
    rest = FROM_IMPORT.sub("", snippet)
    found.update(DOTTED.findall(rest))
    return found


def resolve(dotted: str) -> object:
    """Import the longest module prefix of ``dotted``, then read the rest as attributes."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        module_name = ".".join(parts[:end])
        try:
            value = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name or module_name.startswith(f"{exc.name}."):
                continue  # not a module: an attribute of a shorter prefix
            raise  # a dependency of an existing module is missing
        break
    for attribute in parts[end:]:
        value = getattr(value, attribute)
    return value


def _documented() -> list[tuple[str, str]]:
    out = set()
    for path in DOCS:
        for snippet in code_snippets(path.read_text()):
            out.update((path.name, name) for name in names_in(snippet))
    return sorted(out)


def test_parser_reads_blocks_inline_code_and_lists():
    text = (
        "Use `actlab.theory.moments` or `from actlab.train import Trainer` here.\n\n"
        "```python\nfrom actlab.probe import (\n    Probe,\n    measure_once as m,\n)\n"
        "x = actlab.activation('relu')\n```\n"
        "Prose actlab.not_code is skipped.\n"
    )
    found = set().union(*(names_in(s) for s in code_snippets(text)))
    assert found == {"actlab.theory.moments", "actlab.train.Trainer", "actlab.probe.Probe",
                     "actlab.probe.measure_once", "actlab.activation"}


def test_docs_mention_many_names():
    assert len(_documented()) > 100


@pytest.mark.parametrize(("doc", "name"), _documented())
def test_documented_name_resolves(doc: str, name: str):
    try:
        resolve(name)
    except ModuleNotFoundError as exc:
        if exc.name and not exc.name.startswith("actlab"):
            pytest.skip(f"{name} needs {exc.name}")
        raise AssertionError(f"{doc} names {name}, which does not resolve: {exc}") from exc
    except AttributeError as exc:
        raise AssertionError(f"{doc} names {name}, which does not resolve: {exc}") from exc
