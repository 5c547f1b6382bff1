"""Theory: Gaussian moments, shifts, gains, variance recursion, curvature bounds and gradient angles."""

from actlab.theory.gaussian import Moments, gain, moments, shift
from actlab.theory.recursion import VariancePrediction, predict_variances

__all__ = ["Moments", "VariancePrediction", "gain", "moments", "predict_variances", "shift"]
