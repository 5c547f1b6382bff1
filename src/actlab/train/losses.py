"""Training losses by explicit name; they live in :mod:`actlab.nn.losses` now (below both the
engine and the curvature operators, which take the same losses), re-exported here."""

from actlab.nn.losses import (  # noqa: F401 - re-exported
    ALIASES,
    LOSSES,
    LossFn,
    bce_logits,
    canonical_loss,
    cross_entropy,
    get_loss,
    half_sse,
    half_sse_to_mse_mean,
    mse_mean,
    soft_cross_entropy,
)

__all__ = ["ALIASES", "LOSSES", "LossFn", "bce_logits", "canonical_loss", "cross_entropy",
           "get_loss", "half_sse", "half_sse_to_mse_mean", "mse_mean", "soft_cross_entropy"]
