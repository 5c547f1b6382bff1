"""Angles between gradients (or any two parameter vectors), e.g. of paired students over training."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from actlab.curvature.functional import Batch, LossFn, ParamSelection, as_flat, flat_gradient
from actlab.theory.angle import degrees_from_cosine


def gradient_angle_between(g1: Any, g2: Any) -> float:
    """Angle in degrees between two vectors given as flat tensors, lists of tensors or dicts.

    Two dicts must have the same keys (compared in ``g1``'s order). Computed in float64
    with ``atan2(‖g1 × g2‖, g1·g2)``-like stability via the clamped cosine. Raises
    ``ValueError`` for a zero vector or mismatched sizes.
    """
    if isinstance(g1, Mapping) and isinstance(g2, Mapping):
        if set(g1) != set(g2):
            diff = sorted(set(g1) ^ set(g2))
            raise ValueError(f"the two parameter dicts differ in keys: {diff[:5]}")
        names = list(g1)
        a, b = as_flat(g1, names), as_flat(g2, names)
    else:
        a, b = as_flat(g1), as_flat(g2)
    if a.numel() != b.numel():
        raise ValueError(f"vectors differ in size: {a.numel()} vs {b.numel()}")
    a, b = a.to(torch.float64), b.to(torch.float64)
    na, nb = a.norm(), b.norm()
    if na == 0 or nb == 0:
        raise ValueError("the angle with a zero vector is undefined")
    return degrees_from_cosine(float(torch.dot(a, b) / (na * nb)))


def models_gradient_angle(
    model_a: nn.Module,
    model_b: nn.Module,
    loss_fn: LossFn | str,
    batches: Sequence[Batch] | Batch,
    params: ParamSelection = None,
) -> float:
    """Angle in degrees between two models' loss gradients on the same batches.

    The models must share parameter names and shapes (e.g. the unshifted and shifted
    students). Gradients are computed functionally; neither model is modified.
    """
    ga = flat_gradient(model_a, loss_fn, batches, params)
    gb = flat_gradient(model_b, loss_fn, batches, params)
    return gradient_angle_between(ga, gb)
