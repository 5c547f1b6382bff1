"""The floating-point policy (TF32 off, bf16 opt-in); it lives in :mod:`actlab.device` now,
re-exported here for the imports written before."""

from actlab.device import precision_flags, use_strict_float32  # noqa: F401 - re-exported

__all__ = ["precision_flags", "use_strict_float32"]
