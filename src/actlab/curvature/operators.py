"""Curvature operators: Hessian- and Gauss–Newton-vector products of a model's loss.

Both operators share one interface (``matvec(v)``, ``dim``, ``to_dense()``) so the
eigen-solvers in :mod:`actlab.curvature.eigen` never care which curvature they see.
Products are computed with :mod:`torch.func` on a frozen functional copy of the model:

* Hessian: forward-over-reverse, ``jvp(grad(loss))`` — one forward, one backward and their
  tangents per batch; exact, and cheaper in memory than double backward.
* Gauss–Newton ``JᵀH_L J``: ``jvp`` through the model for ``Jv``, the loss's own
  Hessian-vector product in output space for ``H_L Jv`` (double backward on the output
  only; works for any loss: MSE, cross-entropy, a user lambda), then ``vjp`` for ``Jᵀ(·)``.
  ``H_L`` is positive semi-definite — and hence the operator — for losses convex in the output.

The Hessian falls back to double backward (reverse-over-reverse) if an op in the loss or
model lacks forward-over-reverse support.

Products are averaged over batches weighted by batch size, so with a mean-reduced loss
they equal the curvature of the loss on the union of the batches. The model's parameters,
``.grad`` fields and ``train()``/``eval()`` mode are never changed; a model with dropout
in training mode therefore gives random products (put it in ``eval()`` yourself).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import torch
from torch import nn
from torch.func import grad, jvp, vjp

from actlab.curvature.functional import (
    Batch,
    FunctionalModel,
    LossFn,
    ParamSelection,
    batch_weights,
    check_batches,
    resolve_loss,
)

# to_dense() builds the matrix column by column; beyond this it is almost surely a mistake.
_DENSE_LIMIT = 20_000


class CurvatureOperator(ABC):
    """A symmetric linear operator on flat parameter vectors.

    Subclasses implement :meth:`_matvec`; :meth:`matvec` validates the input and counts
    calls in ``n_matvecs`` (the cost unit of every eigen-solver).
    """

    dim: int
    dtype: torch.dtype
    device: torch.device

    def __init__(self) -> None:
        self.n_matvecs = 0

    @abstractmethod
    def _matvec(self, v: torch.Tensor) -> torch.Tensor:
        """The product with a flat vector of length ``dim``."""

    def matvec(self, v: torch.Tensor) -> torch.Tensor:
        """Return ``A @ v`` for a flat vector ``v`` of length ``dim``."""
        if v.ndim != 1 or v.numel() != self.dim:
            raise ValueError(f"expected a flat vector of length {self.dim}, got shape {tuple(v.shape)}")
        self.n_matvecs += 1
        return self._matvec(v.to(dtype=self.dtype, device=self.device)).detach()

    __matmul__ = matvec

    def to_dense(self) -> torch.Tensor:
        """The full ``dim × dim`` matrix, built from ``dim`` products (small models only)."""
        if self.dim > _DENSE_LIMIT:
            raise ValueError(f"to_dense: dim={self.dim} exceeds {_DENSE_LIMIT}; use an eigen-solver")
        eye = torch.eye(self.dim, dtype=self.dtype, device=self.device)
        cols = [self.matvec(eye[i]) for i in range(self.dim)]
        return torch.stack(cols, dim=1)


class _ModelOperator(CurvatureOperator):
    """Shared set-up: a frozen functional model, a loss and weighted batches."""

    def __init__(
        self,
        model: nn.Module,
        loss_fn: LossFn | str,
        batches: Sequence[Batch] | Batch,
        params: ParamSelection = None,
    ) -> None:
        super().__init__()
        self.fmodel = FunctionalModel(model, params)
        self.loss_fn = resolve_loss(loss_fn)
        self.batches = check_batches(batches)
        self.weights = batch_weights(self.batches)
        self.dim = self.fmodel.dim
        self.dtype = self.fmodel.dtype
        self.device = self.fmodel.device

    @property
    def param_names(self) -> list[str]:
        """Names of the parameters this operator acts on, in flat-vector order."""
        return list(self.fmodel.names)

    def flat_params(self) -> torch.Tensor:
        """The parameters (at which the curvature is taken) as one flat vector."""
        return self.fmodel.flat_params()


class HessianOperator(_ModelOperator):
    """Hessian of the loss with respect to the selected parameters.

    ``HessianOperator(model, loss_fn, batches, params=None, cache_graph=False)``:
    ``loss_fn(output, y)`` is a callable or ``"mse"`` / ``"cross_entropy"``; ``batches`` a
    list of ``(x, y)`` pairs; ``params`` ``None`` (all trainable), a filter
    ``f(name, tensor) -> bool`` or a list of names (for per-block spectra).

    ``cache_graph=True`` trades memory for speed: each batch's gradient graph is built once
    (``create_graph=True``) and kept, and every product is one backward pass through it
    (double backward, as PyHessian does for one batch) instead of a fresh forward-over-
    reverse pass. It holds every batch's activations in memory for the operator's lifetime.
    """

    forward_over_reverse = True

    def __init__(
        self,
        model: nn.Module,
        loss_fn: LossFn | str,
        batches: Sequence[Batch] | Batch,
        params: ParamSelection = None,
        cache_graph: bool = False,
    ) -> None:
        super().__init__(model, loss_fn, batches, params)
        self.cache_graph = cache_graph
        self._graphs: list[tuple[list[torch.Tensor], list[torch.Tensor]]] | None = None

    def _cached_graphs(self) -> list[tuple[list[torch.Tensor], list[torch.Tensor]]]:
        if self._graphs is None:
            graphs = []
            with torch.enable_grad():
                for batch in self.batches:
                    p = {n: t.detach().requires_grad_(True) for n, t in self.fmodel.params.items()}
                    leaves = list(p.values())
                    loss = self.fmodel.loss(p, batch, self.loss_fn)
                    graphs.append((leaves, list(torch.autograd.grad(loss, leaves, create_graph=True))))
            self._graphs = graphs
        return self._graphs

    def _matvec(self, v: torch.Tensor) -> torch.Tensor:
        fm = self.fmodel
        tangent = fm.layout.unflatten(v)
        out = torch.zeros(self.dim, dtype=self.dtype, device=self.device)
        if self.cache_graph:
            for w, (leaves, grads) in zip(self.weights, self._cached_graphs()):
                hv = torch.autograd.grad(
                    grads, leaves, grad_outputs=list(tangent.values()), retain_graph=True, allow_unused=True
                )
                hv = [torch.zeros_like(p) if h is None else h for h, p in zip(hv, leaves)]
                out += w * fm.layout.flatten(hv)
            return out
        for w, batch in zip(self.weights, self.batches):
            out += w * fm.layout.flatten(self._batch_hvp(batch, tangent))
        return out

    def _batch_hvp(self, batch: Batch, tangent: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        fm = self.fmodel
        if self.forward_over_reverse:
            grad_fn = grad(lambda p: fm.loss(p, batch, self.loss_fn))
            try:
                return jvp(grad_fn, (fm.params,), (tangent,))[1]
            except RuntimeError as err:
                # Some ops lack forward-over-reverse support (e.g. F.mse_loss's backward):
                # fall back to double backward for this operator from now on.
                if "ZeroTensor" not in str(err) and "forward AD" not in str(err):
                    raise
                self.forward_over_reverse = False
        with torch.enable_grad():
            p = {n: t.detach().requires_grad_(True) for n, t in fm.params.items()}
            g = torch.autograd.grad(fm.loss(p, batch, self.loss_fn), list(p.values()), create_graph=True)
            hv = torch.autograd.grad(g, list(p.values()), grad_outputs=list(tangent.values()))
        return dict(zip(p, hv))


class GaussNewtonOperator(_ModelOperator):
    """Generalised Gauss–Newton matrix ``E[Jᵀ H_L J]`` of the loss.

    ``J`` is the Jacobian of the model output with respect to the selected parameters and
    ``H_L`` the Hessian of ``loss_fn`` with respect to the output (for ``"mse"``, i.e.
    :func:`torch.nn.functional.mse_loss` with mean reduction, ``H_L = 2/(n·d_out)·I``).
    Positive semi-definite whenever the loss is convex in the output.
    """

    def _matvec(self, v: torch.Tensor) -> torch.Tensor:
        fm = self.fmodel
        tangent = fm.layout.unflatten(v)
        out = torch.zeros(self.dim, dtype=self.dtype, device=self.device)
        for w, (x, y) in zip(self.weights, self.batches):

            def forward(p, x=x):
                return fm(p, x)

            output, vjp_fn = vjp(forward, fm.params)
            _, jv = jvp(forward, (fm.params,), (tangent,))

            (jthjv,) = vjp_fn(self._output_hvp(output, y, jv))
            out += w * fm.layout.flatten(jthjv)
        return out


    def _output_hvp(self, output: torch.Tensor, y: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """``H_L u`` in output space by double backward (small, and works for every loss)."""
        with torch.enable_grad():
            o = output.detach().requires_grad_(True)
            (g,) = torch.autograd.grad(self.loss_fn(o, y), o, create_graph=True)
            if not g.requires_grad:  # loss linear in the output: H_L = 0
                return torch.zeros_like(u)
            (hu,) = torch.autograd.grad(g, o, grad_outputs=u)
        return hu


class DenseOperator(CurvatureOperator):
    """Wrap an explicit symmetric matrix in the operator interface (tests, small problems)."""

    def __init__(self, matrix: torch.Tensor) -> None:
        super().__init__()
        if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
            raise ValueError(f"expected a square matrix, got shape {tuple(matrix.shape)}")
        self.matrix = matrix
        self.dim = matrix.shape[0]
        self.dtype = matrix.dtype
        self.device = matrix.device

    def _matvec(self, v: torch.Tensor) -> torch.Tensor:
        return self.matrix @ v
