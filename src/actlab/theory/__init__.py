"""Theory: Gaussian moments, shifts, gains, variance recursion, curvature bounds, gradient angles
and the drift theorems.

Names are imported lazily: the activation registry uses :mod:`actlab.theory.quadrature`
(``shift=theory``), and an eager import of :mod:`.gaussian` here, which itself reads the
registry, would make the two packages import each other.
"""

from __future__ import annotations

import importlib
from typing import Any

# public name -> submodule that defines it
_LAZY = {
    "Moments": "gaussian",
    "gain": "gaussian",
    "moments": "gaussian",
    "shift": "gaussian",
    "VariancePrediction": "recursion",
    "predict_variances": "recursion",
    "gradient_angle": "angle",
    "relu_moments": "angle",
    "OneBlockCurvature": "curvature",
    "down_projection_sharpness": "curvature",
    "gauss_newton_bounds": "curvature",
    "joint_down_projection_sharpness": "curvature",
    "optimal_scalar_shift": "curvature",
}

__all__ = sorted(_LAZY)
_SUBMODULES = ("angle", "curvature", "drift", "fit", "gaussian", "landmarks", "quadrature",
               "recursion")


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"actlab.theory.{name}")
    submodule = _LAZY.get(name)
    if submodule is None:
        raise AttributeError(f"module 'actlab.theory' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"actlab.theory.{submodule}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
