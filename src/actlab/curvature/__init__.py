"""Curvature operators, eigen-solvers, landscapes and gradient angles."""

from typing import Any

from actlab.curvature.angles import gradient_angle_between, models_gradient_angle
from actlab.curvature.density import SpectralDensity, spectral_density
from actlab.curvature.eigen import (
    EigenInfo,
    TraceEstimate,
    hutchinson_trace,
    lanczos,
    power_iteration,
    top_eigenvalues,
)
from actlab.curvature.functional import flat_gradient, select_parameters
from actlab.curvature.landscape import (
    PlaneGrid,
    filter_normalized_direction,
    initial_gradient_plane,
    loss_plane,
    offplane_plane,
    project_trajectory,
)
from actlab.curvature.operators import (
    CurvatureOperator,
    DenseOperator,
    GaussNewtonOperator,
    HessianOperator,
)

__all__ = [
    "CurvatureOperator",
    "DenseOperator",
    "EigenInfo",
    "GaussNewtonOperator",
    "HessianOperator",
    "PlaneGrid",
    "SpectralDensity",
    "TraceEstimate",
    "filter_normalized_direction",
    "flat_gradient",
    "gradient_angle_between",
    "hutchinson_trace",
    "initial_gradient_plane",
    "lanczos",
    "loss_plane",
    "models_gradient_angle",
    "offplane_plane",
    "plot_plane",
    "power_iteration",
    "project_trajectory",
    "select_parameters",
    "spectral_density",
    "top_eigenvalues",
]


def __getattr__(name: str) -> Any:
    # plot_plane pulls in Matplotlib; load it only when asked for.
    if name == "plot_plane":
        from actlab.curvature.plots import plot_plane

        return plot_plane
    raise AttributeError(f"module 'actlab.curvature' has no attribute {name!r}")
