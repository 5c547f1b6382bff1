"""Loss landscapes on 2-D planes through parameter space ("Rethinking Activation Functions",
§2.3, eqs. 4–5).

The plane through ``θ₀`` spanned by ``d₁, d₂`` is evaluated as ``L(θ₀ + α d₁ + β d₂)``
with :func:`torch.func.functional_call` on detached copies, so the caller's model is
left bit-identical (parameters, buffers, ``.grad`` and training mode). Directions and
points are flat vectors over the selected parameters (see ``params`` below), in
``named_parameters`` order; dicts of named tensors are accepted too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from actlab.curvature.functional import (
    Batch,
    FunctionalModel,
    LossFn,
    ParamSelection,
    as_flat,
    batch_weights,
    check_batches,
    resolve_loss,
)


@dataclass
class PlaneGrid:
    """Loss on a grid: ``loss[i, j]`` is at ``(alphas[j], betas[i])`` (rows follow ``β``)."""

    alphas: torch.Tensor
    betas: torch.Tensor
    loss: torch.Tensor
    d1: torch.Tensor
    d2: torch.Tensor
    theta0: torch.Tensor


def filter_normalized_direction(direction: torch.Tensor, theta: torch.Tensor, fmodel: FunctionalModel) -> torch.Tensor:
    """Filter-normalise ``direction`` (Li et al., 2018) against parameters ``theta``.

    Each filter (slice along the first dimension) of each weight tensor gets the norm of
    the matching filter of ``theta``; 1-D tensors (biases, norm gains) are zeroed, as in
    Li et al.'s default of ignoring biases and normalisation parameters.
    """
    d = fmodel.layout.unflatten(direction.clone())
    t = fmodel.layout.unflatten(theta)
    out = {}
    for name, dt in d.items():
        if dt.ndim <= 1:
            out[name] = torch.zeros_like(dt)
            continue
        dflat = dt.reshape(dt.shape[0], -1)
        tflat = t[name].reshape(dt.shape[0], -1)
        scale = tflat.norm(dim=1, keepdim=True) / dflat.norm(dim=1, keepdim=True).clamp_min(1e-30)
        out[name] = (dflat * scale).reshape(dt.shape)
    return fmodel.layout.flatten(out)


def loss_plane(
    model: nn.Module,
    loss_fn: LossFn | str,
    batches: Sequence[Batch] | Batch,
    d1: Any,
    d2: Any,
    alphas: Sequence[float] | torch.Tensor,
    betas: Sequence[float] | torch.Tensor,
    filter_normalize: bool = False,
    params: ParamSelection = None,
    theta0: Any = None,
) -> PlaneGrid:
    """Evaluate the mean loss (batch-size weighted) at ``θ₀ + α d₁ + β d₂`` on a grid.

    ``θ₀`` defaults to the model's current parameters (``theta0`` may give another
    centre). ``params`` selects which parameters the directions cover (others stay at
    the model's values). Non-finite losses are kept as they are (a diverging region is
    data). The model is never modified.
    """
    fmodel = FunctionalModel(model, params)
    loss = resolve_loss(loss_fn)
    batches = check_batches(batches)
    weights = batch_weights(batches)
    center = fmodel.flat_params() if theta0 is None else _flat(theta0, fmodel)
    u = _flat(d1, fmodel).to(center)
    w = _flat(d2, fmodel).to(center)
    if filter_normalize:
        u = filter_normalized_direction(u, center, fmodel)
        w = filter_normalized_direction(w, center, fmodel)
    a = torch.as_tensor(alphas, dtype=torch.float64)
    b = torch.as_tensor(betas, dtype=torch.float64)
    out = torch.empty(len(b), len(a), dtype=torch.float64)
    with torch.no_grad():
        for i, beta in enumerate(b.tolist()):
            for j, alpha in enumerate(a.tolist()):
                point = fmodel.layout.unflatten(center + alpha * u + beta * w)
                total = 0.0
                for wt, batch in zip(weights, batches):
                    total += wt * float(fmodel.loss(point, batch, loss))
                out[i, j] = total
    return PlaneGrid(a, b, out, u, w, center)


def _flat(x: Any, fmodel: FunctionalModel) -> torch.Tensor:
    vec = as_flat(x, names=fmodel.names if isinstance(x, Mapping) else None)
    if vec.numel() != fmodel.dim:
        raise ValueError(f"direction has {vec.numel()} entries, the selected parameters {fmodel.dim}")
    return vec.to(dtype=fmodel.dtype, device=fmodel.device)


def initial_gradient_plane(g_u: Any, g_s: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Orthonormal basis of eq. 4: ``e₁ = g_u/‖g_u‖``, ``e₂ = (I − e₁e₁ᵀ)g_s / ‖·‖``.

    ``g_u``/``g_s`` are the unshifted/shifted students' initial gradients (flat vectors,
    lists of tensors or dicts in the same order). Raises ``ValueError`` if ``g_u`` is zero
    or ``g_s`` is parallel to it.
    """
    gu, gs = as_flat(g_u), as_flat(g_s)
    if gu.shape != gs.shape:
        raise ValueError(f"gradients differ in size: {gu.numel()} vs {gs.numel()}")
    nu = gu.norm()
    if nu == 0:
        raise ValueError("g_u is zero: the plane is undefined")
    e1 = gu / nu
    r = gs - torch.dot(e1, gs) * e1
    r = r - torch.dot(e1, r) * e1  # second pass keeps e1 ⟂ e2 to rounding
    nr = r.norm()
    if nr <= 1e-12 * gs.norm().clamp_min(1e-300):
        raise ValueError("g_s is parallel to g_u: the plane is undefined")
    return e1, r / nr


def project_trajectory(checkpoints: Sequence[Any], theta0: Any, e1: Any, e2: Any) -> torch.Tensor:
    """Coordinates ``(α, β)`` of each checkpoint's displacement ``θ − θ₀`` in the plane.

    Least-squares projection onto ``span(e₁, e₂)`` (equal to ``(eᵢ·(θ − θ₀))`` when the
    basis is orthonormal). Checkpoints may be flat vectors, dicts (ordered like ``θ₀``
    if ``θ₀`` is a dict) or modules. Returns a ``(len(checkpoints), 2)`` tensor.
    """
    names = list(theta0) if isinstance(theta0, Mapping) else None
    t0 = as_flat(theta0, names)
    basis = torch.stack([as_flat(e1), as_flat(e2)], dim=1).to(t0)
    gram = basis.T @ basis
    coords = []
    for ck in checkpoints:
        vec = as_flat(ck, names if isinstance(ck, Mapping) else None).to(t0)
        if vec.numel() != t0.numel():
            raise ValueError(f"checkpoint has {vec.numel()} entries, theta0 {t0.numel()}")
        coords.append(torch.linalg.solve(gram, basis.T @ (vec - t0)))
    return torch.stack(coords) if coords else torch.empty(0, 2, dtype=t0.dtype)


def offplane_plane(
    trajectory: Sequence[Any], theta0: Any, e1: Any, e2: Any, rtol: float = 1e-8
) -> tuple[torch.Tensor, torch.Tensor]:
    """Orthonormal ``(n₁, n₂)`` spanning a trajectory's displacement off the plane (eq. 5).

    Each ``r_t = (I − e₁e₁ᵀ − e₂e₂ᵀ)(θ(t) − θ₀)`` is Gram–Schmidt orthogonalised, in
    trajectory order, against ``e₁, e₂`` and the basis built so far; displacements whose
    remainder is below ``rtol`` times their norm are skipped. The first two basis vectors
    are returned; ``ValueError`` if the trajectory leaves the plane in fewer than two
    independent directions.
    """
    names = list(theta0) if isinstance(theta0, Mapping) else None
    t0 = as_flat(theta0, names)
    fixed = [as_flat(e1).to(t0), as_flat(e2).to(t0)]
    found: list[torch.Tensor] = []
    for ck in trajectory:
        vec = as_flat(ck, names if isinstance(ck, Mapping) else None).to(t0)
        r = vec - t0
        size = r.norm()
        if size == 0:
            continue
        for _ in range(2):  # re-orthogonalise once more for numerical safety
            for q in fixed + found:
                r = r - torch.dot(q, r) * q
        if r.norm() <= rtol * size:
            continue
        found.append(r / r.norm())
        if len(found) == 2:
            return found[0], found[1]
    raise ValueError(f"the trajectory leaves the plane in only {len(found)} independent direction(s)")
