"""actlab: measure, control and compare what activation functions do to learning.

Top-level names and the public submodules (``actlab.theory``, ``actlab.nn``, ...) are
imported lazily, on first use, so that ``import actlab`` stays fast (it does not import
torch) and a missing optional dependency only matters where it is used.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> "module:attribute"
_LAZY = {
    "activation": "actlab.activations.spec:activation",
    "register_activation": "actlab.activations.spec:register_activation",
    "available_activations": "actlab.activations.spec:available_activations",
    "parse_spec": "actlab.activations.spec:parse_spec",
    "calibrate_shifts_": "actlab.activations.calibrate:calibrate_shifts_",
    "Probe": "actlab.probe.probe:Probe",
    "find_activations": "actlab.surgery:find_activations",
    "patch_": "actlab.surgery:patch_",
    "relufy_": "actlab.surgery:relufy_",
    "register_metric": "actlab.probe.collectors:register_metric",
    "measure_once": "actlab.probe.measure:measure_once",
    "profile_model": "actlab.profile:profile_model",
}

#: Public submodules, reachable as attributes after ``import actlab``.
SUBMODULES = ("activations", "analysis", "cli", "curvature", "data", "errors", "experiments",
              "hf", "init", "integrations", "measure", "nn", "probe", "profile", "recipes",
              "runner", "surgery", "theory", "train")

__all__ = sorted(_LAZY) + ["__version__"]


def __getattr__(name: str) -> Any:
    if name in SUBMODULES:
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise  # a dependency of the submodule is missing: say which
            raise AttributeError(f"module 'actlab' has no attribute {name!r}") from None
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'actlab' has no attribute {name!r}")
    module_name, attr = target.split(":")
    value = getattr(importlib.import_module(module_name), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__ + list(SUBMODULES)
