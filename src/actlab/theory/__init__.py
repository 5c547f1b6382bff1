"""Theory: Gaussian moments, shifts, gains, variance recursion, curvature bounds and gradient angles."""

from actlab.theory.gaussian import Moments, gain, moments, shift
from actlab.theory.recursion import VariancePrediction, predict_variances

__all__ = ["Moments", "VariancePrediction", "gain", "moments", "predict_variances", "shift"]
from actlab.theory.angle import gradient_angle, relu_moments  # noqa: E402
from actlab.theory.curvature import (  # noqa: E402
    down_projection_sharpness,
    gauss_newton_bounds,
    optimal_scalar_shift,
)

__all__ += ["down_projection_sharpness", "gauss_newton_bounds", "gradient_angle", "optimal_scalar_shift", "relu_moments"]
