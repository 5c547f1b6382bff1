"""Plain mini-batch SGD for networks with one sigmoid output and the cross-entropy cost.

The cost is computed from the output's net input (logits), so it stays finite when the
sigmoid saturates; a cost that still overflows marks the run diverged (recorded, never
raised). Used by the handbook's spiral studies (``init-study``, ``dead-units``, ``pitfalls``).

:func:`train_binary_sgd` trains one model with the engine's
:class:`~actlab.train.loop.Trainer` (plain SGD, the reference);
:func:`train_binary_sgd_ensemble` trains one model per seed as one vmapped
:class:`~actlab.train.ensemble.Ensemble` with exactly the loop's batch order, updates and
divergence rule per member, so each member ends where its own loop run would (to rounding).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from actlab.data.sampling import EpochBatches
from actlab.train.callbacks import Callback
from actlab.train.ensemble import DEFAULT_CONDITION, Ensemble, EnsembleTrainer
from actlab.train.functional_optim import FunctionalSGD
from actlab.train.loop import STATUS_DIVERGED, Trainer
from actlab.train.losses import bce_logits
from actlab.train.placement import to_model_device, to_unit_device
from actlab.train.settings import TrainSettings
from actlab.train.supervised import torch_threads

mean_bce = bce_logits  # the engine's loss name for it (actlab.train.losses)


@dataclass
class BinaryRun:
    """Outcome of :func:`train_binary_sgd`.

    ``costs`` lists the whole-training-set cost before training and after every completed
    epoch; ``diverged`` is set when a mini-batch or epoch cost overflowed (training stops
    there; the epoch is recorded as ``nan``).
    """

    costs: list[float] = field(default_factory=list)
    diverged: bool = False


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
    # The spiral networks are tiny (32 units): splitting their matrix products across threads
    # only adds synchronisation, very costly when the cores are shared; parallelism comes
    # from running units in separate processes instead.
    with torch_threads(1):
        return _train_binary_sgd(model, x, y, lr=lr, batch_size=batch_size, epochs=epochs,
                                 seed=seed, on_epoch=on_epoch)


def _train_binary_sgd(model, x, y, *, lr, batch_size, epochs, seed, on_epoch) -> BinaryRun:
    n = x.shape[0]
    per_epoch = n // batch_size
    run = BinaryRun()
    costs = _EpochCost(model, x, y, run, on_epoch, every=max(1, per_epoch))
    if per_epoch == 0:  # no full batch: nothing trains, every epoch costs the same
        costs.on_step(None, 0, None)
        run.costs += run.costs[-1:] * epochs
        return run
    order = EpochBatches(n, batch_size, torch.Generator().manual_seed(int(seed)))
    settings = TrainSettings(optimizer="sgd", lr=lr, steps=epochs * per_epoch,
                             batch_size=batch_size, loss="bce_logits", log_every=epochs * per_epoch
                             if epochs else 1)

    def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        idx = order(step)
        return x[idx], y[idx]

    result = Trainer(model, settings, batch, loss_fn=lambda m, b: mean_bce(m(b[0]), b[1]),
                     callbacks=[costs]).fit()
    if result.status == STATUS_DIVERGED and costs.stop_reason is None:  # a mini-batch overflowed
        run.diverged = True
        run.costs.append(math.nan)
    return run


class _EpochCost(Callback):
    """The whole-set cost before training and after every epoch (``every`` = batches per
    epoch); a non-finite cost ends the run as diverged."""

    def __init__(self, model, x, y, run: BinaryRun, on_epoch, every: int) -> None:
        super().__init__(every=every)
        self.model, self.x, self.y, self.run, self.on_epoch = model, x, y, run, on_epoch

    def on_step(self, trainer, step: int, loss) -> None:
        """Record the epoch's cost (a host synchronisation, once per epoch)."""
        with torch.no_grad():
            # moved once (to where the trainer put the model); later calls find it there
            self.x, self.y = to_model_device(self.model, self.x, self.y)
            cost = float(mean_bce(self.model(self.x), self.y))
        finite = math.isfinite(cost)
        self.run.costs.append(cost if finite else math.nan)
        if not finite:
            self.run.diverged = True
            self.request_stop(STATUS_DIVERGED)
        elif self.on_epoch is not None:
            self.on_epoch(step // self.every, self.model)


def _stack_per_seed(name: str, values: torch.Tensor | Sequence[torch.Tensor],
                    count: int) -> torch.Tensor:
    """``values`` as one tensor with a leading seed dimension of ``count``."""
    if not isinstance(values, torch.Tensor):
        values = list(values)
        if len(values) != count:
            raise ValueError(f"{name}: need one tensor per seed ({count}), got {len(values)}")
        shapes = {tuple(v.shape) for v in values}
        if len(shapes) != 1:
            raise ValueError(f"{name}: every seed's tensor must have the same shape, got "
                             f"{sorted(shapes)}")
        values = torch.stack(values)
    if values.dim() < 2 or values.shape[0] != count:
        raise ValueError(f"{name}: need a leading seed dimension of {count} (one entry per "
                         f"seed) and a sample dimension, got shape {tuple(values.shape)}")
    return values


def train_binary_sgd_ensemble(
    models: Sequence[nn.Module],
    xs: torch.Tensor | Sequence[torch.Tensor],
    ys: torch.Tensor | Sequence[torch.Tensor],
    *,
    lr: float,
    batch_size: int,
    epochs: int,
    seeds: Sequence[int],
    on_epoch: Callable[[int, int, nn.Module], None] | None = None,
) -> list[BinaryRun]:
    """Train ``models[i]`` on ``(xs[i], ys[i])`` with batch-order seed ``seeds[i]``, all as one ensemble.

    Member ``i`` gets exactly what ``train_binary_sgd(models[i], xs[i], ys[i], seed=seeds[i],
    ...)`` would do: the same permutation stream, plain SGD with ``lr``, its whole-set cost
    before training and after every epoch, and the same divergence rule (a non-finite
    mini-batch or epoch cost records ``nan`` for that epoch and stops that member; the
    others go on). The members run as one :class:`~actlab.train.ensemble.Ensemble` under
    :func:`torch.vmap`, so results equal the loop's to rounding, not bit for bit.

    Args:
        models: one model per seed, all of the same structure (same parameter names and
            shapes; stateless forward, see :mod:`actlab.train.ensemble`). Their parameters
            are overwritten in place with the trained ones (a diverged member's with those
            it had when it stopped), so they can be evaluated afterwards as usual.
        xs, ys: per-seed inputs and labels, stacked (``(S, n, ...)`` and ``(S, n)``) or as
            sequences of ``S`` equal-shape tensors.
        seeds: the batch-order seed of every member (as ``train_binary_sgd``'s ``seed``).
        on_epoch: ``on_epoch(epoch, member_index, model)`` for every finite recorded epoch
            (0 before training), epochs in order and members in order within an epoch;
            ``model`` is a standalone copy of the member (:meth:`Ensemble.member`), made only
            when a callback is given.

    Returns:
        One :class:`BinaryRun` per member, in order.
    """
    models = list(models)
    seeds = [int(s) for s in seeds]
    count = len(models)
    if count == 0:
        raise ValueError("models: need at least one model")
    if len(seeds) != count:
        raise ValueError(f"seeds: need one seed per model ({count}), got {len(seeds)}")
    if len({id(m) for m in models}) != count:
        raise ValueError("models: every seed needs its own model object (the trained "
                         "parameters are written back into each)")
    x = _stack_per_seed("xs", xs, count)
    y = _stack_per_seed("ys", ys, count)
    if y.shape[1] != x.shape[1]:
        raise ValueError(f"ys: need as many labels as xs has samples ({x.shape[1]}), got "
                         f"{y.shape[1]}")
    if int(batch_size) < 1:
        raise ValueError(f"batch_size: must be >= 1, got {batch_size}")
    if int(epochs) < 0:
        raise ValueError(f"epochs: must be >= 0, got {epochs}")
    shapes = [[(k, tuple(p.shape)) for k, p in m.named_parameters()] for m in models]
    if any(s != shapes[0] for s in shapes[1:]):
        raise ValueError("models: every model must have the same parameter names and shapes")
    with torch_threads(1):  # as in train_binary_sgd
        return _train_binary_sgd_ensemble(models, x, y, lr=lr, batch_size=int(batch_size),
                                          epochs=int(epochs), seeds=seeds, on_epoch=on_epoch)


def _train_binary_sgd_ensemble(models, x, y, *, lr, batch_size, epochs, seeds,
                               on_epoch) -> list[BinaryRun]:
    ensemble = Ensemble(models)
    trainer = EnsembleTrainer(ensemble, mean_bce, FunctionalSGD(lr=lr), inputs="per_seed")
    count, n = x.shape[0], x.shape[1]
    x, y = to_unit_device(x, y, device=ensemble.device)
    # CPU generators: the same permutations on every device (moved once per epoch)
    generators = [torch.Generator().manual_seed(s) for s in seeds]
    runs = [BinaryRun() for _ in models]
    # Members still training; a stopped member is frozen by the trainer (its parameters stay
    # where the loop run would have left them).
    active = [True] * count
    rows = torch.arange(count, device=ensemble.device).unsqueeze(1)

    def record(epoch: int) -> None:
        with torch.no_grad():
            costs = ensemble.losses(mean_bce, x, y)[DEFAULT_CONDITION].tolist()
        for i in range(count):
            if not active[i]:
                continue
            # A non-finite mini-batch loss during this epoch stopped the member in the loop
            # version before its epoch cost was measured.
            cost = math.nan if trainer.diverged[0, i] else costs[i]
            finite = math.isfinite(cost)
            runs[i].costs.append(cost if finite else math.nan)
            if not finite:
                runs[i].diverged = True
                active[i] = False
                trainer.freeze(DEFAULT_CONDITION, i)  # no further updates
            elif on_epoch is not None:
                on_epoch(epoch, i, ensemble.member(DEFAULT_CONDITION, i))

    record(0)
    for epoch in range(1, epochs + 1):
        if not any(active):
            break
        # Every active member draws its permutation from its own stream, as in the loop (a
        # stopped member draws no more, as its loop run would not).
        order = torch.stack([torch.randperm(n, generator=g) if a else torch.arange(n)
                             for g, a in zip(generators, active)]).to(ensemble.device)
        for start in range(0, n - batch_size + 1, batch_size):
            if bool(trainer.diverged.all()):
                break  # every member has stopped: nothing left to compute this epoch
            idx = order[:, start:start + batch_size]
            trainer.step(x[rows, idx], y[rows, idx])
        record(epoch)
    with torch.no_grad():
        for i, model in enumerate(models):
            for name, param in model.named_parameters():
                param.copy_(ensemble.params[DEFAULT_CONDITION][name][i])
    return runs


@torch.no_grad()
def binary_accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """Share of points whose sigmoid output falls on the side of their label (nan if non-finite)."""
    x, y = to_model_device(model, x, y)
    logits = model(x).reshape(-1)
    if not torch.isfinite(logits).all():
        return math.nan
    return float(((logits > 0).to(y.dtype) == y).double().mean())
