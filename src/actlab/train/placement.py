"""The unit's device and placement helpers; they live in :mod:`actlab.device` now (below every
layer that places tensors), re-exported here for the imports written before."""

from actlab.device import (  # noqa: F401 - re-exported
    model_device,
    move_batch,
    on_device,
    place,
    resolve_device,
    to_model_device,
    to_unit_device,
    unit_device,
)

__all__ = ["model_device", "move_batch", "on_device", "place", "resolve_device",
           "to_model_device", "to_unit_device", "unit_device"]
