"""A folder of tiny Python files: a text corpus for the language-model tests."""

from __future__ import annotations

from pathlib import Path


def write_code_folder(root: Path, files: int, repeats: int) -> Path:
    """Write ``files`` files ``f<i>.py`` into ``root`` (created if missing), each a one-line
    function repeated ``repeats`` times; return ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        (root / f"f{i}.py").write_text(f"def f{i}(x):\n    return x * {i} + 1\n" * repeats)
    return root
