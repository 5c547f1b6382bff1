"""Parameter selection, flat vectors and functional model calls shared by the curvature tools.

Everything here works on *detached copies* of a model's parameters through
:func:`torch.func.functional_call`, so the caller's model (its parameters, gradients and
``train()``/``eval()`` mode) is never touched.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad

from actlab.errors import did_you_mean

ParamSelection = Callable[[str, torch.Tensor], bool] | Sequence[str] | None
Batch = tuple[Any, Any]
LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]



def mse_loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean squared error, the same value as ``F.mse_loss(output, target)`` (mean reduction).

    Written out because ``F.mse_loss``'s backward breaks forward-over-reverse
    differentiation in PyTorch ("ZeroTensors are immutable").
    """
    diff = output - target
    return (diff * diff).mean()


# The engine's explicit names (actlab.nn.losses); a bare "mse" means "mse_mean".
_NAMED_LOSSES: dict[str, LossFn] = {
    "mse_mean": mse_loss,
    "mse": mse_loss,
    "cross_entropy": F.cross_entropy,
}


def resolve_loss(loss_fn: LossFn | str) -> LossFn:
    """Return ``loss_fn`` itself, or the loss named ``"mse"`` / ``"cross_entropy"``.

    ``F.mse_loss`` is swapped for the equivalent :func:`mse_loss` (see there why).
    """
    from actlab.nn.losses import mse_mean

    if loss_fn is F.mse_loss or loss_fn is mse_mean:
        return mse_loss
    if callable(loss_fn):
        return loss_fn
    if isinstance(loss_fn, str):
        if loss_fn in _NAMED_LOSSES:
            return _NAMED_LOSSES[loss_fn]
        raise ValueError(_unknown("loss", loss_fn, _NAMED_LOSSES))
    raise TypeError(f"loss_fn must be a callable or a loss name, got {type(loss_fn).__name__}")


def _unknown(kind: str, name: str, valid: Iterable[str]) -> str:
    valid = list(valid)
    hint = did_you_mean(name, valid, n=3, cutoff=0.3, quote=True, prefix="; ")
    return f"unknown {kind} {name!r}{hint} (valid: {', '.join(valid[:20])}{' ...' if len(valid) > 20 else ''})"


def select_parameters(model: nn.Module, params: ParamSelection = None) -> list[str]:
    """Names of the parameters of ``model`` chosen by ``params``, in ``named_parameters`` order.

    ``params`` is ``None`` (every parameter with ``requires_grad``), a callable
    ``filter(name, tensor) -> bool``, or a list of parameter names. Unknown names raise
    ``ValueError`` naming the closest valid ones; an empty selection raises ``ValueError``.
    """
    named = dict(model.named_parameters())
    if params is None:
        names = [n for n, p in named.items() if p.requires_grad]
    elif callable(params):
        names = [n for n, p in named.items() if params(n, p)]
    elif isinstance(params, str):
        raise TypeError("params must be a list of names, not a single string; wrap it in a list")
    else:
        wanted = list(params)
        for name in wanted:
            if name not in named:
                raise ValueError(_unknown("parameter", name, named))
        wanted_set = set(wanted)
        names = [n for n in named if n in wanted_set]
    if not names:
        raise ValueError("the parameter selection is empty")
    return names


class ParamLayout:
    """Maps between a dict of named tensors and one flat vector (concatenated in name order)."""

    def __init__(self, tensors: Mapping[str, torch.Tensor]) -> None:
        self.names = list(tensors)
        self.shapes = [tuple(t.shape) for t in tensors.values()]
        self.numels = [t.numel() for t in tensors.values()]
        self.dim = sum(self.numels)

    def flatten(self, tensors: Mapping[str, torch.Tensor] | Sequence[torch.Tensor]) -> torch.Tensor:
        """Concatenate tensors (a mapping with this layout's names, or a sequence in its order)."""
        if isinstance(tensors, Mapping):
            missing = [n for n in self.names if n not in tensors]
            if missing:
                raise ValueError(f"missing entries for parameters {missing[:5]}")
            seq = [tensors[n] for n in self.names]
        else:
            seq = list(tensors)
            if len(seq) != len(self.names):
                raise ValueError(f"expected {len(self.names)} tensors, got {len(seq)}")
        for t, shape, name in zip(seq, self.shapes, self.names):
            if tuple(t.shape) != shape:
                raise ValueError(f"{name}: expected shape {shape}, got {tuple(t.shape)}")
        return torch.cat([t.reshape(-1) for t in seq])

    def unflatten(self, vec: torch.Tensor) -> dict[str, torch.Tensor]:
        """Split a flat vector into a dict of views shaped like the parameters."""
        if vec.ndim != 1 or vec.numel() != self.dim:
            raise ValueError(f"expected a flat vector of length {self.dim}, got shape {tuple(vec.shape)}")
        chunks = torch.split(vec, self.numels)
        return {n: c.view(s) for n, c, s in zip(self.names, chunks, self.shapes)}


class FunctionalModel:
    """A frozen functional view of ``model``: selected parameters become explicit inputs.

    The selected parameters, the others and the buffers are detached clones taken at
    construction, so later changes to the model do not leak in and nothing here writes to
    the model. The model's ``training`` flag is used as it is (never switched).
    """

    def __init__(self, model: nn.Module, params: ParamSelection = None) -> None:
        self.model = model
        self.names = select_parameters(model, params)
        chosen = set(self.names)
        all_params = dict(model.named_parameters())
        self.params = {n: all_params[n].detach().clone() for n in self.names}
        self.fixed = {n: p.detach().clone() for n, p in all_params.items() if n not in chosen}
        self.fixed.update({n: b.detach().clone() for n, b in model.named_buffers()})
        self.layout = ParamLayout(self.params)
        first = next(iter(self.params.values()))
        self.dtype = first.dtype
        self.device = first.device

    @property
    def dim(self) -> int:
        """Number of selected scalar parameters."""
        return self.layout.dim

    def flat_params(self) -> torch.Tensor:
        """The selected parameters as one flat vector (a copy)."""
        return self.layout.flatten(self.params)

    def __call__(self, params: Mapping[str, torch.Tensor], x: Any) -> torch.Tensor:
        """Run the model with ``params`` for the selected parameters."""
        inputs = x if isinstance(x, tuple) else (x,)
        return functional_call(self.model, (dict(params), self.fixed), inputs)

    def loss(self, params: Mapping[str, torch.Tensor], batch: Batch, loss_fn: LossFn) -> torch.Tensor:
        """Loss of one ``(x, y)`` batch at ``params``."""
        x, y = batch
        return loss_fn(self(params, x), y)


def batch_size(batch: Batch) -> int:
    """Number of examples in an ``(x, y)`` batch (first dimension of ``y``, else of ``x``)."""
    x, y = batch
    ref = y if isinstance(y, torch.Tensor) and y.ndim > 0 else (x[0] if isinstance(x, tuple) else x)
    return int(ref.shape[0])


def batch_weights(batches: Sequence[Batch]) -> list[float]:
    """Weights proportional to batch size, summing to one (a mean-reduced loss averages exactly)."""
    sizes = [batch_size(b) for b in batches]
    total = float(sum(sizes))
    return [s / total for s in sizes]


def check_batches(batches: Any) -> list[Batch]:
    """Accept one ``(x, y)`` pair or a sequence of them; return a list of pairs."""
    if isinstance(batches, tuple) and len(batches) == 2 and isinstance(batches[0], torch.Tensor):
        return [batches]
    batches = list(batches)
    if not batches:
        raise ValueError("batches is empty: pass a list of (x, y) pairs")
    for b in batches:
        if not (isinstance(b, (tuple, list)) and len(b) == 2):
            raise ValueError("each batch must be an (x, y) pair")
    return [tuple(b) for b in batches]


def flat_gradient(
    model: nn.Module,
    loss_fn: LossFn | str,
    batches: Sequence[Batch] | Batch,
    params: ParamSelection = None,
) -> torch.Tensor:
    """Gradient of the (batch-size weighted) mean loss as one flat vector; ``.grad`` is untouched."""
    fmodel = FunctionalModel(model, params)
    loss = resolve_loss(loss_fn)
    batches = check_batches(batches)
    total = torch.zeros(fmodel.dim, dtype=fmodel.dtype, device=fmodel.device)
    for w, batch in zip(batch_weights(batches), batches):
        g = grad(lambda p, b=batch: fmodel.loss(p, b, loss))(fmodel.params)
        total += w * fmodel.layout.flatten(g)
    return total


def as_flat(x: Any, names: Sequence[str] | None = None) -> torch.Tensor:
    """A flat vector from a tensor, a list/tuple of tensors, a mapping or an ``nn.Module``.

    For a mapping, ``names`` (when given) fixes which entries and in what order; otherwise
    the mapping's own order is used. For a module its ``named_parameters`` are used.
    """
    if isinstance(x, nn.Module):
        x = dict(x.named_parameters())
    if isinstance(x, torch.Tensor):
        return x.detach().reshape(-1)
    if isinstance(x, Mapping):
        keys = list(names) if names is not None else list(x)
        missing = [k for k in keys if k not in x]
        if missing:
            raise ValueError(f"missing entries {missing[:5]}")
        return torch.cat([x[k].detach().reshape(-1) for k in keys])
    if isinstance(x, (list, tuple)):
        if not x:
            raise ValueError("empty list of tensors")
        return torch.cat([t.detach().reshape(-1) for t in x])
    raise TypeError(f"cannot make a flat vector from {type(x).__name__}")
