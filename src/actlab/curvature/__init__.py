"""Curvature operators, eigen-solvers, landscapes and gradient angles.

Names are imported on first use (``plot_plane`` is the one that needs Matplotlib).
"""

from __future__ import annotations

from actlab._lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "gradient_angle_between": ".angles",
    "models_gradient_angle": ".angles",
    "SpectralDensity": ".density",
    "spectral_density": ".density",
    "EigenInfo": ".eigen",
    "TraceEstimate": ".eigen",
    "hutchinson_trace": ".eigen",
    "lanczos": ".eigen",
    "power_iteration": ".eigen",
    "top_eigenvalues": ".eigen",
    "warm_start": ".eigen",
    "flat_gradient": ".functional",
    "select_parameters": ".functional",
    "PlaneGrid": ".landscape",
    "filter_normalized_direction": ".landscape",
    "initial_gradient_plane": ".landscape",
    "loss_plane": ".landscape",
    "offplane_plane": ".landscape",
    "project_trajectory": ".landscape",
    "CurvatureOperator": ".operators",
    "DenseOperator": ".operators",
    "GaussNewtonOperator": ".operators",
    "HessianOperator": ".operators",
    "plot_plane": ".plots",
})
