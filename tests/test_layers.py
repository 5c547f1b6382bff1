"""Layers that only point down: no module of ``src/actlab`` imports one of a higher layer.

The layers are read from the table in ``docs/architecture.md`` (the one place they are
written down). Imports are read from the source with :mod:`ast`, as the import-cycle test
does: every ``import`` statement counts, inside functions too. Importing ``a.b.c`` runs the
``__init__`` of ``a.b`` on the way; that package is only *passed through*, and it counts as
imported unless its ``__init__`` loads nothing above layer 0 when it runs (every package
exports lazily, so none does).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from test_import_cycles import ROOT, SRC, _ancestors, _cycles, _modules, statement_targets

DOC = SRC.parent / "docs" / "architecture.md"

# Imports that point up on purpose: (importer, imported) -> why. Keep this short; an old
# import path kept for users belongs in the higher package, re-exporting the lower home.
UPWARD = {
    ("actlab.runner.experiment", "actlab.experiments"):
        "list_experiments discovers the experiment packages by importing actlab.experiments",
}


def parse_layers(text: str) -> dict[str, int]:
    """``{"theory.quadrature": 1, ...}`` from the table under ``## The layers``."""
    section = text.split("## The layers", 1)[1].split("\n## ", 1)[0]
    layers: dict[str, int] = {}
    for number, cell in re.findall(r"^\|\s*(\d+)\s*\|([^|]*)\|", section, re.MULTILINE):
        for name in re.findall(r"`([^`]+)`", cell):
            assert name not in layers, f"{name} is in two layers of {DOC.name}"
            layers[name] = int(number)
    return layers


def entry_of(module: str, layers: dict[str, int]) -> str | None:
    """The table entry a module belongs to: the longest one that is a prefix of its name."""
    parts = module.split(".")[1:]
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in layers:
            return ".".join(parts[:end])
    return None


def imports(module: str, path: Path, known: dict[str, Path]) -> tuple[set[str], set[str]]:
    """``(named, passed)``: the actlab modules ``module``'s import statements name, and the
    packages they only pass through on the way to a module inside them."""
    is_package = path.name == "__init__.py"
    own = set(_ancestors(module)) | {module}
    named: set[str] = set()
    passed: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: set[str] = set()
        for name in statement_targets(node, module, is_package):
            if name == ROOT or name.startswith(ROOT + "."):
                targets.update(n for n in [*_ancestors(name), name] if n in known)
        inner = {t for t in targets if any(other.startswith(t + ".") for other in targets)}
        named |= targets - inner - own
        passed |= inner - own
    return named, passed - named


def loaded_on_import(path: Path, module: str, known: dict[str, Path]) -> set[str]:
    """The actlab modules a module's top-level statements import (not those in functions)."""
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    pending = list(ast.parse(path.read_text(), str(path)).body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for name in statement_targets(node, module, is_package):
            if name.startswith(ROOT + "."):
                out.update(n for n in [*_ancestors(name), name] if n in known and n != ROOT)
        pending.extend(child for child in ast.iter_child_nodes(node) if isinstance(child, ast.stmt))
    return out - {module}


def violations(layers: dict[str, int], known: dict[str, Path]) -> tuple[list[str], dict]:
    """Upward imports (``"a -> b (layer 5 -> 6)"``) and the graph between table entries."""
    def layer(module: str) -> int:
        return layers[entry_of(module, layers)]

    transparent = {
        name: all(layer(m) == 0 for m in loaded_on_import(path, name, known))
        for name, path in known.items() if path.name == "__init__.py" and name != ROOT
    }
    found: list[str] = []
    graph: dict[str, set[str]] = {}
    for module, path in sorted(known.items()):
        if module == ROOT:
            continue  # the lazy facade above every layer
        named, passed = imports(module, path, known)
        reached = named | {p for p in passed if not transparent.get(p, True)}
        for target in sorted(reached - {ROOT}):
            if (module, target) in UPWARD:
                continue
            graph.setdefault(entry_of(module, layers), set()).add(entry_of(target, layers))
            if layer(target) > layer(module):
                found.append(f"{module} -> {target} (layer {layer(module)} -> {layer(target)})")
    for entry in graph:
        graph[entry].discard(entry)
    return found, graph


def test_table_parses_and_names_only_real_modules():
    layers = parse_layers(DOC.read_text())
    assert layers["errors"] == 0 and layers["theory.quadrature"] < layers["activations"]
    assert layers["runner"] < layers["experiments"] < layers["cli"]
    known = _modules()
    missing = [name for name in layers if f"{ROOT}.{name}" not in known]
    assert missing == [], f"{DOC.name} names modules that do not exist: {missing}"


def test_every_module_has_a_layer():
    layers = parse_layers(DOC.read_text())
    unplaced = [m for m in _modules() if m != ROOT and entry_of(m, layers) is None]
    assert unplaced == [], f"add these to the table in docs/{DOC.name}: {unplaced}"


def test_finder_sees_an_upward_import_and_passes_through_lazy_packages(tmp_path: Path):
    (tmp_path / "low").mkdir()
    (tmp_path / "high").mkdir()
    files = {
        "actlab.low": ("low/__init__.py", ""),
        "actlab.low.a": ("low/a.py", "def f():\n    from actlab.high.b import g\n"),
        "actlab.high": ("high/__init__.py", "from actlab._lazy import lazy_exports\n"),
        "actlab.high.b": ("high/b.py", ""),
        "actlab.high.c": ("high/c.py", "from actlab.high import low_thing\n"),
        "actlab.base": ("base.py", "import actlab.high.quad\n"),
        "actlab.high.quad": ("high/quad.py", ""),
        "actlab._lazy": ("_lazy.py", ""),
    }
    known = {}
    for name, (rel, text) in files.items():
        (tmp_path / rel).write_text(text)
        known[name] = tmp_path / rel
    layers = {"_lazy": 0, "base": 0, "high.quad": 0, "low": 1, "high": 2}
    found, graph = violations(layers, known)
    assert found == ["actlab.low.a -> actlab.high.b (layer 1 -> 2)"]
    assert "high" not in graph.get("base", set())  # passed through a lazy __init__
    # An __init__ that loads its modules when imported is not passed through.
    known["actlab.high"].write_text("from actlab.high import b\n")
    found, _ = violations(layers, known)
    assert "actlab.base -> actlab.high (layer 0 -> 2)" in found


def test_layers_only_point_down():
    found, _ = violations(parse_layers(DOC.read_text()), _modules())
    assert found == [], ("imports of a higher layer (see docs/architecture.md):\n  "
                         + "\n  ".join(found))


def test_packages_do_not_import_each_other_both_ways():
    _, graph = violations(parse_layers(DOC.read_text()), _modules())
    cycles = _cycles(graph)
    assert cycles == [], "packages that import each other: " + "; ".join(
        " <-> ".join(c) for c in cycles)


def test_the_allowed_upward_imports_are_still_there():
    known = _modules()
    for (importer, target), why in UPWARD.items():
        named, _ = imports(importer, known[importer], known)
        assert target in named, f"stale exception in UPWARD ({why}): remove it"
