"""One way for a package to export its public names: lazily, on first use.

A package's ``__init__`` names what it exports and where each name lives; nothing is
imported until a name is asked for, so ``import actlab.train`` stays cheap (no torch) and
importing one module of a package never loads its siblings::

    from actlab._lazy import lazy_exports

    __getattr__, __dir__, __all__ = lazy_exports(__name__, {
        "Trainer": ".loop",                     # actlab.train.loop.Trainer
        "place": ".placement",
        "ProbeCallback": "actlab.integrations.lightning:ProbeCallback",  # module:attribute
    })

A value is a module, relative to the package (``".loop"``) or absolute, optionally followed
by ``:attribute`` when the attribute's name differs from the exported one. The package's
submodules are reachable as attributes too (``actlab.theory.gaussian`` after ``import
actlab.theory``). A name once loaded is stored in the package, so later look-ups are plain
attribute reads.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def _target(package: str, where: str, name: str) -> tuple[str, str]:
    module, _, attribute = where.partition(":")
    if module.startswith("."):
        module = package + module
    return module, attribute or name


def lazy_exports(
    package: str, exports: Mapping[str, str], *, extra: Iterable[str] = ()
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """``(__getattr__, __dir__, __all__)`` for the package ``package`` (pass ``__name__``).

    ``exports`` maps each public name to the module that defines it (see the module
    docstring for the forms); ``extra`` adds names the package defines itself (e.g.
    ``__version__``) to ``__all__``. An unknown name raises :class:`AttributeError` naming
    the package, as a plain module does; a submodule whose own import fails because a
    dependency is missing raises that :class:`ModuleNotFoundError`, naming the dependency.
    """
    targets = {name: _target(package, where, name) for name, where in exports.items()}
    public = sorted({*targets, *extra})
    submodules: list[str] = []

    def _submodules() -> list[str]:
        # Listed once, on first need: one read of the package's folder.
        if not submodules:
            path = getattr(sys.modules[package], "__path__", [])
            submodules.extend(sorted(info.name for info in pkgutil.iter_modules(path)
                                     if not info.name.startswith("_")))
        return submodules

    def __getattr__(name: str) -> Any:
        target = targets.get(name)
        if target is not None:
            value = getattr(importlib.import_module(target[0]), target[1])
        elif not name.startswith("_") and name in _submodules():
            value = importlib.import_module(f"{package}.{name}")
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*public, *_submodules()})

    __getattr__.exports = dict(targets)  # type: ignore[attr-defined]  # read by the tests
    return __getattr__, __dir__, list(public)
