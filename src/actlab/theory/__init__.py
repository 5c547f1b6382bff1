"""Theory: Gaussian moments, shifts, gains, variance recursion, curvature bounds, gradient angles
and the drift theorems.

Names are imported on first use. That also keeps the layers apart: the activation registry
imports :mod:`actlab.theory.quadrature` (``shift=theory``), which runs this ``__init__`` on the
way; an eager import of :mod:`.gaussian` here, which reads the registry, would make the two
packages import each other.
"""

from __future__ import annotations

from actlab._lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "Moments": ".gaussian",
    "gain": ".gaussian",
    "moments": ".gaussian",
    "shift": ".gaussian",
    "VariancePrediction": ".recursion",
    "predict_variances": ".recursion",
    "gradient_angle": ".angle",
    "relu_moments": ".angle",
    "OneBlockCurvature": ".curvature",
    "down_projection_sharpness": ".curvature",
    "gauss_newton_bounds": ".curvature",
    "joint_down_projection_sharpness": ".curvature",
    "optimal_scalar_shift": ".curvature",
})
