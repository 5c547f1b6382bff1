"""Atomic file writes: write a temporary file in the same folder, then ``os.replace`` it.

A reader therefore sees either the old file or the complete new one, never a partial
write, even when the writer is killed (SIGKILL) half-way. Temporary names end in
``.tmp`` so that globbing for ``*.json`` or ``*.csv`` never picks one up.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

TMP_SUFFIX = ".tmp"


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (temp file + fsync + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}{TMP_SUFFIX}")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def to_jsonable(value: Any) -> Any:
    """Convert numpy/torch scalars and arrays, tuples, sets and paths to plain JSON types."""
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(to_jsonable(v) for v in value)
    if isinstance(value, (str, bool, int, float)) or value is None:
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if hasattr(value, "tolist"):  # numpy arrays/scalars, torch tensors
        return to_jsonable(value.tolist())
    if hasattr(value, "item"):
        return to_jsonable(value.item())
    if hasattr(value, "__dataclass_fields__"):
        import dataclasses

        return to_jsonable(dataclasses.asdict(value))
    return str(value)


def dumps(value: Any, indent: int | None = 2) -> str:
    """JSON text of ``value`` (after :func:`to_jsonable`).

    Key order is kept (it is deterministic and experiments may rely on it); NaN and
    infinities are written as Python's ``json`` writes them (``NaN``, ``Infinity``).
    """
    return json.dumps(to_jsonable(value), indent=indent, allow_nan=True) + "\n"


def atomic_write_json(path: str | os.PathLike, value: Any, indent: int | None = 2) -> Path:
    """Write ``value`` as JSON to ``path`` atomically."""
    return atomic_write_text(path, dumps(value, indent=indent))


def read_json(path: str | os.PathLike) -> Any:
    """Read a JSON file written by :func:`atomic_write_json`; a file that is not valid JSON
    (truncated, edited) raises ``ValueError`` naming the file and where it breaks."""
    with open(path, encoding="utf-8") as handle:
        try:
            return json.load(handle)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not valid JSON at line {exc.lineno}, column {exc.colno} "
                             f"({exc.msg}): the file is truncated or was edited") from None
