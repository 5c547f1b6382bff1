"""No import cycles in ``src/actlab``, counting every import statement (inside functions too).

The graph is built from the source with :mod:`ast`, not by importing: an edge goes from a
module to every module an ``import`` or ``from ... import`` statement anywhere in it loads,
including the packages whose ``__init__`` runs on the way (except the importer's own
packages, which are already being initialised when it runs).
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT = "actlab"


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted((SRC / ROOT).rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def statement_targets(node: ast.AST, module: str, is_package: bool) -> list[str]:
    """The dotted names one import statement loads (before filtering to known modules)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        if node.level:
            base = module.split(".") if is_package else module.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            source = ".".join(base + ([node.module] if node.module else []))
        else:
            source = node.module or ""
        return [source] + [f"{source}.{alias.name}" for alias in node.names]
    return []


def _imported(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Every actlab module that some import statement of ``module`` loads."""
    is_package = path.name == "__init__.py"
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        for name in statement_targets(node, module, is_package):
            if name == ROOT or name.startswith(ROOT + "."):
                targets.update(n for n in [*_ancestors(name), name] if n in known)
    own = set(_ancestors(module))
    return {t for t in targets if t != module and t not in own}


def _graph() -> dict[str, set[str]]:
    known = _modules()
    return {name: _imported(name, path, known) for name, path in known.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_graph_sees_imports_inside_functions(tmp_path: Path):
    # The walker must see a function-level import and the packages it runs on the way.
    path = tmp_path / "a.py"
    path.write_text("def f():\n    from actlab.theory.gaussian import shift\n")
    known = {"actlab.a": path, "actlab.theory": path, "actlab.theory.gaussian": path}
    assert _imported("actlab.a", path, known) == {"actlab.theory", "actlab.theory.gaussian"}


def test_cycle_finder_finds_a_planted_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_no_import_cycles_in_actlab():
    graph = _graph()
    assert len(graph) > 50  # the whole package was read
    cycles = _cycles(graph)
    assert cycles == [], "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_quadrature_imports_nothing_from_actlab():
    # The one Gaussian quadrature sits below the registry and the theory code alike.
    path = SRC / ROOT / "theory" / "quadrature.py"
    assert _imported("actlab.theory.quadrature", path, _modules()) == set()
