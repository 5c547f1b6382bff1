"""The handbook's binary SGD on the two spirals: one sigmoid output, the cross-entropy cost,
plain mini-batch SGD (the handbook page "Activations and initialization"; used by
``init-study``, ``dead-units`` and ``pitfalls``).

The cost is computed from the output's net input (:func:`actlab.nn.losses.bce_logits`),
so it stays finite when the sigmoid saturates; a cost that still overflows marks the run
diverged (recorded, never raised). Every epoch visits a fresh permutation of the training
set from a seeded generator in batches of ``batch_size``, the last partial batch dropped.

One model, through the engine's :class:`~actlab.train.loop.Trainer`::

    from actlab.data.spirals import data_seed, two_spirals
    from actlab.nn.deep_mlp import deep_mlp
    from actlab.recipes.spirals import binary_accuracy, train_binary_sgd

    x, y = two_spirals(300, seed=data_seed(seed, 0))
    model = deep_mlp(2, 32, 3, 1, activation="relu", scheme="he", seed=seed)
    run = train_binary_sgd(model, x, y, lr=0.1, batch_size=20, epochs=200,
                           seed=data_seed(seed, 2))
    run.costs      # whole-set cost before training and after every epoch
    accuracy = math.nan if run.diverged else binary_accuracy(model, x_test, y_test)

Many seeds as one vmapped ensemble (:class:`~actlab.train.ensemble.EnsembleTrainer`): member
``i`` trains exactly as ``train_binary_sgd(models[i], xs[i], ys[i], seed=seeds[i], ...)``
would, to rounding::

    runs = train_binary_sgd_ensemble(models, xs, ys, lr=0.01, batch_size=20, epochs=150,
                                     seeds=[data_seed(s, 2) for s in seeds],
                                     on_epoch=lambda epoch, i, model: ...)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from actlab.data.sampling import EpochBatches
from actlab.device import to_model_device, to_unit_device
from actlab.nn.losses import bce_logits
from actlab.train.callbacks import Callback
from actlab.train.ensemble import DEFAULT_CONDITION, Ensemble, EnsembleTrainer
from actlab.train.functional_optim import FunctionalSGD
from actlab.train.loop import STATUS_DIVERGED, Trainer
from actlab.train.settings import TrainSettings
from actlab.train.supervised import torch_threads

__all__ = ["BinaryRun", "binary_accuracy", "train_binary_sgd", "train_binary_sgd_ensemble"]


@dataclass
class BinaryRun:
    """Outcome of :func:`train_binary_sgd` (or of one ensemble member).

    ``costs`` lists the whole-training-set cost before training and after every completed
    epoch; ``diverged`` is set when a mini-batch or epoch cost overflowed (training stops
    there; the epoch is recorded as ``nan``).
    """

    costs: list[float] = field(default_factory=list)
    diverged: bool = False


def train_binary_sgd(
    model: nn.Module,
    x: Tensor,
    y: Tensor,
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
    (epoch 0) and after each epoch whose cost is finite.
    """
    # The spiral networks are tiny (32 units): splitting their matrix products across threads
    # only adds synchronisation, very costly when the cores are shared; parallelism comes
    # from running units in separate processes instead.
    with torch_threads(1):
        return _train_binary_sgd(model, x, y, lr=lr, batch_size=batch_size, epochs=epochs,
                                 seed=seed, on_epoch=on_epoch)


def _train_binary_sgd(model: nn.Module, x: Tensor, y: Tensor, *, lr: float, batch_size: int,
                      epochs: int, seed: int,
                      on_epoch: Callable[[int, nn.Module], None] | None) -> BinaryRun:
    n = x.shape[0]
    per_epoch = n // batch_size
    run = BinaryRun()
    costs = _EpochCost(model, x, y, run, on_epoch, every=max(1, per_epoch))
    if per_epoch == 0:  # no full batch: nothing trains, every epoch costs the same
        costs.on_step(None, 0, None)
        run.costs += run.costs[-1:] * epochs
        return run
    order = EpochBatches(n, batch_size, torch.Generator().manual_seed(int(seed)))
    steps = epochs * per_epoch
    settings = TrainSettings(optimizer="sgd", lr=lr, steps=steps, batch_size=batch_size,
                             loss="bce_logits", log_every=steps if epochs else 1)

    def batch(step: int) -> tuple[Tensor, Tensor]:
        idx = order(step)
        return x[idx], y[idx]

    result = Trainer(model, settings, batch, loss_fn=lambda m, b: bce_logits(m(b[0]), b[1]),
                     callbacks=[costs]).fit()
    if result.status == STATUS_DIVERGED and costs.stop_reason is None:  # a mini-batch overflowed
        run.diverged = True
        run.costs.append(math.nan)
    return run


class _EpochCost(Callback):
    """The whole-set cost before training and after every epoch (``every`` = batches per
    epoch); a non-finite cost ends the run as diverged."""

    def __init__(self, model: nn.Module, x: Tensor, y: Tensor, run: BinaryRun,
                 on_epoch: Callable[[int, nn.Module], None] | None, every: int) -> None:
        super().__init__(every=every)
        self.model, self.x, self.y, self.run, self.on_epoch = model, x, y, run, on_epoch

    def on_step(self, trainer: object, step: int, loss: Tensor | None) -> None:
        """Record the epoch's cost (a host synchronisation, once per epoch)."""
        with torch.no_grad():
            # moved once (to where the trainer put the model); later calls find it there
            self.x, self.y = to_model_device(self.model, self.x, self.y)
            cost = float(bce_logits(self.model(self.x), self.y))
        finite = math.isfinite(cost)
        self.run.costs.append(cost if finite else math.nan)
        if not finite:
            self.run.diverged = True
            self.request_stop(STATUS_DIVERGED)
        elif self.on_epoch is not None:
            self.on_epoch(step // self.every, self.model)


def _stack_per_seed(name: str, values: Tensor | Sequence[Tensor], count: int) -> Tensor:
    """``values`` as one tensor with a leading seed dimension of ``count``."""
    if not isinstance(values, Tensor):
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
    xs: Tensor | Sequence[Tensor],
    ys: Tensor | Sequence[Tensor],
    *,
    lr: float,
    batch_size: int,
    epochs: int,
    seeds: Sequence[int],
    on_epoch: Callable[[int, int, nn.Module], None] | None = None,
    callbacks: Sequence[Callback] = (),
) -> list[BinaryRun]:
    """Train ``models[i]`` on ``(xs[i], ys[i])`` with batch-order seed ``seeds[i]``, all as one ensemble.

    Member ``i`` gets exactly what ``train_binary_sgd(models[i], xs[i], ys[i], seed=seeds[i],
    ...)`` would do: the same batch order (its own :class:`~actlab.data.sampling.EpochBatches`
    over ``torch.Generator().manual_seed(seeds[i])``), plain SGD with ``lr``, its whole-set
    cost before training and after every epoch, and the same divergence rule (a non-finite
    mini-batch or epoch cost records ``nan`` for that epoch and stops that member; the
    others go on). The members train through :meth:`EnsembleTrainer.fit
    <actlab.train.ensemble.EnsembleTrainer.fit>` under :func:`torch.vmap`, so results equal
    the loop's to rounding, not bit for bit.

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
            when a hook is given. As in ``train_binary_sgd``, a training set smaller than
            one batch trains nothing and calls it for epoch 0 only.
        callbacks: more engine callbacks for :meth:`EnsembleTrainer.fit`, fired on their own
            schedules in update counts (``n // batch_size`` updates per epoch) after the
            recipe's per-epoch cost, with the members' batch losses as a ``(S,)`` tensor.

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
                                          epochs=int(epochs), seeds=seeds, on_epoch=on_epoch,
                                          callbacks=list(callbacks))


def _train_binary_sgd_ensemble(models: list[nn.Module], x: Tensor, y: Tensor, *, lr: float,
                               batch_size: int, epochs: int, seeds: list[int],
                               on_epoch: Callable[[int, int, nn.Module], None] | None,
                               callbacks: list[Callback]) -> list[BinaryRun]:
    ensemble = Ensemble(models)
    trainer = EnsembleTrainer(ensemble, bce_logits, FunctionalSGD(lr=lr), inputs="per_seed")
    n = x.shape[1]
    per_epoch = n // batch_size
    x, y = to_unit_device(x, y, device=ensemble.device)
    runs = [BinaryRun() for _ in models]
    costs = _MemberEpochCosts(ensemble, x, y, runs, on_epoch, every=max(1, per_epoch))
    # The loop's own batch order per member: CPU generators give the same permutations on
    # every device; a step's indices are moved once, for all members together.
    orders = [EpochBatches(n, batch_size, torch.Generator().manual_seed(s)) for s in seeds]
    rows = torch.arange(len(models), device=ensemble.device).unsqueeze(1)

    def batch(step: int) -> tuple[Tensor, Tensor]:
        idx = torch.stack([order(step) for order in orders]).to(ensemble.device)
        return x[rows, idx], y[rows, idx]

    trainer.fit(epochs * per_epoch, batch, [costs, *callbacks])
    if per_epoch == 0:  # as train_binary_sgd: nothing trained, every epoch costs the same
        for run in runs:
            run.costs += run.costs[-1:] * epochs
    with torch.no_grad():
        for i, model in enumerate(models):
            for name, param in model.named_parameters():
                param.copy_(ensemble.params[DEFAULT_CONDITION][name][i])
    return runs


class _MemberEpochCosts(Callback):
    """Every member's whole-set cost before training and after every epoch (``every`` =
    batches per epoch) and the loop's stop rule per member; ``on_epoch`` for finite costs.

    A member is frozen (:meth:`EnsembleTrainer.freeze`) once its cost is non-finite, so its
    parameters stay where its loop run stopped; when none is left, a stop is requested.
    """

    def __init__(self, ensemble: Ensemble, x: Tensor, y: Tensor, runs: list[BinaryRun],
                 on_epoch: Callable[[int, int, nn.Module], None] | None, every: int) -> None:
        super().__init__(every=every)
        self.ensemble, self.x, self.y, self.runs, self.on_epoch = ensemble, x, y, runs, on_epoch
        self.active = [True] * len(runs)

    def on_step(self, trainer: EnsembleTrainer, step: int, loss: Tensor | None) -> None:
        """Record the epoch's cost of every member still training (one host read per epoch)."""
        with torch.no_grad():
            costs = self.ensemble.losses(bce_logits, self.x, self.y)[DEFAULT_CONDITION].tolist()
        for i, run in enumerate(self.runs):
            if not self.active[i]:
                continue
            # A non-finite mini-batch loss this epoch stopped the member in the loop version
            # before its epoch cost was measured.
            cost = math.nan if trainer.diverged[0, i] else costs[i]
            finite = math.isfinite(cost)
            run.costs.append(cost if finite else math.nan)
            if not finite:
                run.diverged = True
                self.active[i] = False
                trainer.freeze(DEFAULT_CONDITION, i)  # no further updates
            elif self.on_epoch is not None:
                self.on_epoch(step // self.every, i, self.ensemble.member(DEFAULT_CONDITION, i))
        if not any(self.active):
            self.request_stop(STATUS_DIVERGED)


@torch.no_grad()
def binary_accuracy(model: nn.Module, x: Tensor, y: Tensor) -> float:
    """Share of points whose sigmoid output falls on the side of their label (nan if non-finite)."""
    x, y = to_model_device(model, x, y)
    logits = model(x).reshape(-1)
    if not torch.isfinite(logits).all():
        return math.nan
    return float(((logits > 0).to(y.dtype) == y).double().mean())
