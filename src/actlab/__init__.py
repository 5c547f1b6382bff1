"""actlab: measure, control and compare what activation functions do to learning.

Top-level names and the public submodules (``actlab.theory``, ``actlab.nn``, ...) are
imported lazily, on first use (:mod:`actlab._lazy`), so that ``import actlab`` stays fast (it
does not import torch) and a missing optional dependency only matters where it is used.
"""

from __future__ import annotations

from actlab._lazy import lazy_exports

__version__ = "0.1.0"

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "activation": ".activations.spec_activation",
    "act_layer": ".activations.layer",
    "spec_of": ".activations.interop",
    "register_activation": ".activations.registry",
    "available_activations": ".activations.registry",
    "parse_spec": ".activations.grammar",
    "calibrate_shifts_": ".activations.calibrate",
    "Probe": ".probe.probe",
    "find_activations": ".surgery",
    "patch_": ".surgery",
    "relufy_": ".surgery",
    "register_metric": ".probe.collectors",
    "measure_once": ".probe.measure",
    "profile_model": ".profile",
    "checkpoint_trajectory": ".trajectory",
}, extra=["__version__"])
