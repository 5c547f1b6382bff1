"""Plain mini-batch SGD for networks with one sigmoid output and the cross-entropy cost.

The cost is computed from the output's net input (logits), so it stays finite when the
sigmoid saturates; a cost that still overflows marks the run diverged (recorded, never
raised). Used by the handbook's spiral studies (``init-study``, ``dead-units``, ``pitfalls``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from actlab.train.classify import torch_threads


def mean_bce(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of a sigmoid output from its net input (one member of the ensemble)."""
    return F.binary_cross_entropy_with_logits(logits.reshape(-1), labels.reshape(-1))


@dataclass
class BinaryRun:
    """Outcome of :func:`train_binary_sgd`.

    ``costs`` lists the whole-training-set cost before training and after every completed
    epoch; ``diverged`` is set when a mini-batch or epoch cost overflowed (training stops
    there; the epoch is recorded as ``nan``).
    """

    costs: list[float] = field(default_factory=list)
    diverged: bool = False


@contextmanager
def single_thread():
    """Run torch ops on one intra-op thread for the block (the caller's setting is restored).

    The spiral networks are tiny (32 units): splitting their matrix products across threads
    only adds synchronisation, which becomes very costly when the cores are shared;
    parallelism comes from running units in separate processes instead.
    """
    with torch_threads(1):
        yield


def train_binary_sgd(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    lr: float,
    batch_size: int,
    epochs: int,
    seed: int,
    on_epoch: Callable[[int, nn.Module], None] | None = None,
) -> BinaryRun:
    """Train ``model`` in place by plain mini-batch SGD on a sigmoid / cross-entropy output.

    Each epoch visits a fresh permutation from ``torch.Generator().manual_seed(seed)`` (use a
    seed whose stream no model was drawn from, e.g. :func:`actlab.data.spirals.data_seed`) in
    batches of ``batch_size`` (a last partial batch is dropped). A non-finite cost marks the
    run diverged and ends it, never raising. ``on_epoch(epoch, model)`` runs before training
    (epoch 0) and after each epoch.
    """
    with single_thread():
        return _train_binary_sgd(model, x, y, lr=lr, batch_size=batch_size, epochs=epochs,
                                 seed=seed, on_epoch=on_epoch)


def _train_binary_sgd(model, x, y, *, lr, batch_size, epochs, seed, on_epoch) -> BinaryRun:
    generator = torch.Generator().manual_seed(int(seed))
    params = [p for p in model.parameters() if p.requires_grad]
    run = BinaryRun()
    n = x.shape[0]

    def record(epoch: int) -> bool:
        with torch.no_grad():
            cost = float(mean_bce(model(x), y))
        finite = math.isfinite(cost)
        run.costs.append(cost if finite else math.nan)
        run.diverged |= not finite
        if finite and on_epoch is not None:
            on_epoch(epoch, model)
        return finite

    if not record(0):
        return run
    for epoch in range(1, epochs + 1):
        order = torch.randperm(n, generator=generator)
        for start in range(0, n - batch_size + 1, batch_size):
            idx = order[start:start + batch_size]
            loss = mean_bce(model(x[idx]), y[idx])
            if not torch.isfinite(loss):
                run.diverged = True
                run.costs.append(math.nan)
                return run
            grads = torch.autograd.grad(loss, params)
            with torch.no_grad():  # plain SGD (torch.optim.SGD's arithmetic, without its import cost)
                for param, grad in zip(params, grads):
                    param.add_(grad, alpha=-lr)
        if not record(epoch):
            return run
    return run


@torch.no_grad()
def binary_accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """Share of points whose sigmoid output falls on the side of their label (nan if non-finite)."""
    logits = model(x).reshape(-1)
    if not torch.isfinite(logits).all():
        return math.nan
    return float(((logits > 0).to(y.dtype) == y).double().mean())
