"""The spirals recipe: the handbook's binary SGD, one model and a vmapped ensemble, against a
plain PyTorch loop written out here (batch order, batch losses, gradients, epoch costs)."""

from __future__ import annotations

import math

import pytest
import torch

from actlab.data.spirals import data_seed, two_spirals
from actlab.nn.deep_mlp import deep_mlp
from actlab.recipes.spirals import (
    BinaryRun,
    binary_accuracy,
    train_binary_sgd,
    train_binary_sgd_ensemble,
)
from actlab.train.callbacks import Callback, LossHistory

SEEDS = (0, 1, 2)
# 70 points in batches of 20: the last partial batch (10 points) is dropped every epoch.
N_TRAIN, BATCH, EPOCHS, LR = 70, 20, 4, 0.1
PER_EPOCH = N_TRAIN // BATCH


def _data(seed: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = two_spirals(N_TRAIN, seed=data_seed(seed, 0))
    return x.to(dtype), y.to(dtype)


def _models(dtype: torch.dtype, activation: str = "tanh") -> list[torch.nn.Module]:
    return [deep_mlp(2, 16, 3, 1, activation=activation, scheme="xavier", seed=s, dtype=dtype)
            for s in SEEDS]


def _loop(models, data, **kwargs) -> list[BinaryRun]:
    return [train_binary_sgd(m, x, y, seed=data_seed(s, 2), **kwargs)
            for m, (x, y), s in zip(models, data, SEEDS)]


def _cost(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of sigmoid(logits), closed form: softplus(z) - y z."""
    z = logits.reshape(-1)
    return (torch.nn.functional.softplus(z) - y * z).mean()


def _reference(model: torch.nn.Module, x, y, *, lr: float, batch_size: int, epochs: int,
               seed: int) -> dict:
    """Plain PyTorch: a fresh ``randperm`` per epoch, full batches only, p -= lr * grad."""
    generator = torch.Generator().manual_seed(seed)
    out: dict = {"costs": [], "batch_losses": [], "grads": []}
    with torch.no_grad():
        out["costs"].append(float(_cost(model(x), y)))
    for _ in range(epochs):
        order = torch.randperm(len(x), generator=generator)
        for start in range(0, len(x) - batch_size + 1, batch_size):
            idx = order[start:start + batch_size]
            loss = _cost(model(x[idx]), y[idx])
            grads = torch.autograd.grad(loss, list(model.parameters()))
            out["batch_losses"].append(float(loss.detach()))
            out["grads"].append(torch.cat([g.reshape(-1) for g in grads]))
            with torch.no_grad():
                for p, g in zip(model.parameters(), grads):
                    p -= lr * g
        with torch.no_grad():
            out["costs"].append(float(_cost(model(x), y)))
    return out


def _assert_runs_equal(loop: list[BinaryRun], ens: list[BinaryRun], rtol: float) -> None:
    for ref, got in zip(loop, ens, strict=True):
        assert got.diverged == ref.diverged
        assert len(got.costs) == len(ref.costs)
        for a, b in zip(ref.costs, got.costs):
            if math.isnan(a):
                assert math.isnan(b)
            else:
                assert b == pytest.approx(a, rel=rtol, abs=0)


def _relative(got: torch.Tensor, ref: torch.Tensor) -> float:
    """``|got - ref| / |ref|`` (Euclidean), scaled first so huge diverged weights don't overflow."""
    scale = ref.abs().max()
    return float(((got - ref) / scale).norm() / (ref / scale).norm())


def _flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach()


def _assert_params_equal(loop_models, ens_models, rtol: float) -> None:
    for ref, got in zip(loop_models, ens_models, strict=True):
        assert _relative(_flat(got), _flat(ref)) <= rtol


class _Grads(Callback):
    """Every update's per-member flat gradients (the trainer keeps them when asked)."""

    def __init__(self) -> None:
        super().__init__(every=1)
        self.rows: list[torch.Tensor] = []

    def fires(self, step: int) -> bool:
        return step > 0

    def wants_grads(self, step: int) -> bool:
        return True

    def on_step(self, trainer, step, loss) -> None:
        self.rows.append(trainer.last_member_grads().clone())


class _Count(Callback):
    """The update counts at which its schedule fired."""

    def __init__(self, every: int) -> None:
        super().__init__(every=every)
        self.steps: list[int] = []

    def on_step(self, trainer, step, loss) -> None:
        self.steps.append(step)


def test_single_model_equals_plain_pytorch_sgd():
    x, y = _data(0, torch.float64)
    model, reference = _models(torch.float64)[0], _models(torch.float64)[0]
    run = train_binary_sgd(model, x, y, lr=LR, batch_size=BATCH, epochs=EPOCHS, seed=7)
    ref = _reference(reference, x, y, lr=LR, batch_size=BATCH, epochs=EPOCHS, seed=7)
    assert not run.diverged and len(run.costs) == EPOCHS + 1
    assert run.costs == pytest.approx(ref["costs"], rel=1e-12)
    assert _relative(_flat(model), _flat(reference)) <= 1e-12
    assert run.costs[-1] < run.costs[0]  # it trained


def test_ensemble_batch_losses_gradients_and_costs_equal_plain_pytorch():
    data = [_data(s, torch.float64) for s in SEEDS]
    refs = [_reference(m, x, y, lr=LR, batch_size=BATCH, epochs=EPOCHS, seed=data_seed(s, 2))
            for m, (x, y), s in zip(_models(torch.float64), data, SEEDS)]
    history, grads = LossHistory(), _Grads()
    models = _models(torch.float64)
    runs = train_binary_sgd_ensemble(models, [x for x, _ in data], [y for _, y in data], lr=LR,
                                     batch_size=BATCH, epochs=EPOCHS,
                                     seeds=[data_seed(s, 2) for s in SEEDS],
                                     callbacks=[history, grads])
    losses = history.values()
    assert len(losses) == len(grads.rows) == EPOCHS * PER_EPOCH
    for i, (run, ref) in enumerate(zip(runs, refs)):
        assert run.costs == pytest.approx(ref["costs"], rel=1e-12)
        assert [step[i] for step in losses] == pytest.approx(ref["batch_losses"], rel=1e-12)
        for got, want in zip(grads.rows, ref["grads"], strict=True):
            assert _relative(got[i], want) <= 1e-12


def test_first_gradient_matches_finite_differences():
    # the closed-form cost's gradient, independently of autograd: central differences
    x, y = _data(0, torch.float64)
    model = _models(torch.float64)[0]
    grads = _Grads()
    train_binary_sgd_ensemble([model], [x], [y], lr=LR, batch_size=BATCH, epochs=1,
                              seeds=[3], callbacks=[grads])
    idx = torch.randperm(N_TRAIN, generator=torch.Generator().manual_seed(3))[:BATCH]
    fresh = _models(torch.float64)[0]
    flat = _flat(fresh)
    eps = 1e-6

    def cost_at(vector: torch.Tensor) -> float:
        torch.nn.utils.vector_to_parameters(vector, fresh.parameters())
        with torch.no_grad():
            return float(_cost(fresh(x[idx]), y[idx]))

    for k in (0, 5, flat.numel() - 1):  # a first-layer weight, another, the output bias
        step = torch.zeros_like(flat)
        step[k] = eps
        numeric = (cost_at(flat + step) - cost_at(flat - step)) / (2 * eps)
        assert grads.rows[0][0, k].item() == pytest.approx(numeric, rel=1e-6, abs=1e-9)


@pytest.mark.parametrize("dtype, rtol", [(torch.float64, 1e-12), (torch.float32, 1e-6)])
def test_ensemble_equals_a_loop_of_the_reference(dtype, rtol):
    data = [_data(s, dtype) for s in SEEDS]
    loop_models, ens_models = _models(dtype), _models(dtype)
    loop = _loop(loop_models, data, lr=LR, batch_size=BATCH, epochs=EPOCHS)
    ens = train_binary_sgd_ensemble(
        ens_models, [x for x, _ in data], [y for _, y in data], lr=LR, batch_size=BATCH,
        epochs=EPOCHS, seeds=[data_seed(s, 2) for s in SEEDS])
    assert all(len(r.costs) == EPOCHS + 1 and not r.diverged for r in ens)
    _assert_runs_equal(loop, ens, rtol)
    # trained parameters were written back into the caller's models, and they moved
    _assert_params_equal(loop_models, ens_models, rtol)
    for trained, fresh in zip(ens_models, _models(dtype)):  # moved far beyond the tolerance
        assert _relative(_flat(trained), _flat(fresh)) > 1e3 * rtol


def test_callbacks_fire_on_their_schedules_every_epoch():
    data = [_data(s, torch.float64) for s in SEEDS]
    epochs, per_update = _Count(every=PER_EPOCH), _Count(every=1)
    calls: list[tuple[int, int]] = []
    train_binary_sgd_ensemble(_models(torch.float64), [x for x, _ in data], [y for _, y in data],
                              lr=LR, batch_size=BATCH, epochs=EPOCHS,
                              seeds=[data_seed(s, 2) for s in SEEDS],
                              on_epoch=lambda e, i, m: calls.append((e, i)),
                              callbacks=[epochs, per_update])
    assert epochs.steps == [PER_EPOCH * e for e in range(EPOCHS + 1)]
    assert per_update.steps == list(range(EPOCHS * PER_EPOCH + 1))
    assert calls == [(e, i) for e in range(EPOCHS + 1) for i in range(len(SEEDS))]


def test_stacked_inputs_equal_lists_and_members_keep_their_own_batch_order():
    data = [_data(s, torch.float64) for s in SEEDS]
    xs = torch.stack([x for x, _ in data])
    ys = torch.stack([y for _, y in data])
    from_lists, from_stack = _models(torch.float64), _models(torch.float64)
    kwargs = dict(lr=LR, batch_size=BATCH, epochs=2, seeds=[data_seed(s, 2) for s in SEEDS])
    a = train_binary_sgd_ensemble(from_lists, list(xs), list(ys), **kwargs)
    b = train_binary_sgd_ensemble(from_stack, xs, ys, **kwargs)
    assert [r.costs for r in a] == [r.costs for r in b]
    # Same model and data for every member, but different batch-order seeds: the members
    # must end in different places (each follows its own permutation stream).
    same = [_models(torch.float64)[0] for _ in range(2)]
    train_binary_sgd_ensemble(same, xs[:1].expand(2, -1, -1), ys[:1].expand(2, -1), lr=LR,
                              batch_size=BATCH, epochs=1, seeds=[1, 2])
    assert not torch.allclose(same[0].output.weight, same[1].output.weight)


def test_no_full_batch_trains_nothing_as_in_the_loop():
    data = [_data(s, torch.float64) for s in SEEDS]
    loop_models, ens_models = _models(torch.float64), _models(torch.float64)
    loop = _loop(loop_models, data, lr=LR, batch_size=N_TRAIN + 1, epochs=3)
    calls: list[tuple[int, int]] = []
    ens = train_binary_sgd_ensemble(ens_models, [x for x, _ in data], [y for _, y in data],
                                    lr=LR, batch_size=N_TRAIN + 1, epochs=3,
                                    seeds=[data_seed(s, 2) for s in SEEDS],
                                    on_epoch=lambda e, i, m: calls.append((e, i)))
    _assert_runs_equal(loop, ens, 1e-12)
    assert all(len(set(r.costs)) == 1 and len(r.costs) == 4 for r in ens)
    assert calls == [(0, i) for i in range(len(SEEDS))]  # as the loop: epoch 0 only
    _assert_params_equal(_models(torch.float64), ens_models, 0.0)


def _diverging_models() -> list[torch.nn.Module]:
    # 20-layer ReLU stacks: He's gain trains; twice its variance (gain 2, relu-1.41he in the
    # init study) overflows.
    seeds, gains = (0, 1, 2, 3), (None, 2.0, 2.0, None)
    return [deep_mlp(2, 16, 20, 1, activation="relu", scheme="he", seed=s, gain=g)
            for s, g in zip(seeds, gains)]


def test_diverging_members_stop_alone_the_others_finish_as_in_their_loop_runs():
    # At this learning rate seed 1 overflows in a mini-batch of epoch 2 and seed 2 in its
    # whole-set cost after epoch 1 (its mini-batch costs stay finite): both ways of
    # stopping, next to two members that train on.
    seeds = (0, 1, 2, 3)
    data = [_data(s, torch.float64) for s in seeds]
    loop_models, ens_models = _diverging_models(), _diverging_models()
    kwargs = dict(lr=0.01, batch_size=BATCH, epochs=EPOCHS)
    loop = [train_binary_sgd(m, x, y, seed=data_seed(s, 2), **kwargs)
            for m, (x, y), s in zip(loop_models, data, seeds)]
    # the scenario under test
    assert [r.diverged for r in loop] == [False, True, True, False]
    assert [len(r.costs) for r in loop] == [EPOCHS + 1, 3, 2, EPOCHS + 1]
    ens = train_binary_sgd_ensemble(ens_models, [x for x, _ in data], [y for _, y in data],
                                    seeds=[data_seed(s, 2) for s in seeds], **kwargs)
    _assert_runs_equal(loop, ens, 1e-12)
    # every member, the stopped ones included, ends with the parameters its loop run left
    _assert_params_equal(loop_models, ens_models, 1e-12)


def test_training_ends_once_every_member_has_stopped():
    # seeds 1 and 2 of the scenario above alone: both stopped after epoch 2, so of the
    # EPOCHS * PER_EPOCH updates only those of the first two epochs run.
    data = [_data(s, torch.float64) for s in (1, 2)]
    models = _diverging_models()[1:3]
    updates = _Count(every=1)
    runs = train_binary_sgd_ensemble(models, [x for x, _ in data], [y for _, y in data],
                                     lr=0.01, batch_size=BATCH, epochs=EPOCHS,
                                     seeds=[data_seed(s, 2) for s in (1, 2)],
                                     callbacks=[updates])
    assert all(r.diverged for r in runs) and [len(r.costs) for r in runs] == [3, 2]
    assert updates.steps == list(range(2 * PER_EPOCH + 1))


def test_a_member_overflowing_before_training_stops_at_once_and_stays_frozen():
    data = [_data(s, torch.float64) for s in SEEDS]
    models = _models(torch.float64, activation="relu")
    # Output bias -9e306: each class-1 point costs about 9e306, so a mini-batch's mean stays
    # finite (fewer than 20 such points) but the whole set's sum of 35 overflows. The epoch-0
    # cost is infinite: the loop run stops before training although every mini-batch could
    # still take a finite step, so only the stop rule keeps this member where it started.
    with torch.no_grad():
        models[2].output.bias.fill_(-9e306)
    start = _flat(models[2]).clone()
    calls = []
    runs = train_binary_sgd_ensemble(models, [x for x, _ in data], [y for _, y in data],
                                     lr=LR, batch_size=BATCH, epochs=2,
                                     seeds=[data_seed(s, 2) for s in SEEDS],
                                     on_epoch=lambda e, i, m: calls.append((e, i)))
    assert runs[2].diverged and len(runs[2].costs) == 1 and math.isnan(runs[2].costs[0])
    assert not runs[0].diverged and len(runs[0].costs) == 3
    assert torch.equal(_flat(models[2]), start)
    assert calls == [(e, i) for e in range(3) for i in (0, 1)]  # never for the stopped one


def test_on_epoch_sees_a_standalone_copy_of_each_member_at_each_epoch():
    data = [_data(s, torch.float64) for s in SEEDS]
    loop_seen: dict[tuple[int, int], torch.Tensor] = {}
    for i, (model, (x, y), s) in enumerate(zip(_models(torch.float64), data, SEEDS)):
        train_binary_sgd(model, x, y, lr=LR, batch_size=BATCH, epochs=3, seed=data_seed(s, 2),
                         on_epoch=lambda e, m, i=i: loop_seen.__setitem__(
                             (e, i), m.output.weight.detach().clone()))
    seen, order = {}, []

    def on_epoch(epoch: int, member: int, model: torch.nn.Module) -> None:
        order.append((epoch, member))
        seen[(epoch, member)] = model.output.weight.detach().clone()
        with torch.no_grad():  # a copy: vandalising it must not touch the training
            for p in model.parameters():
                p.zero_()

    ens_models = _models(torch.float64)
    train_binary_sgd_ensemble(ens_models, [x for x, _ in data], [y for _, y in data], lr=LR,
                              batch_size=BATCH, epochs=3, seeds=[data_seed(s, 2) for s in SEEDS],
                              on_epoch=on_epoch)
    assert order == [(e, i) for e in range(4) for i in range(3)]
    for key, weight in loop_seen.items():
        torch.testing.assert_close(seen[key], weight, rtol=1e-12, atol=1e-15)
    assert torch.allclose(ens_models[0].output.weight, loop_seen[(3, 0)], rtol=1e-12)


def test_binary_accuracy_counts_the_sides_of_the_labels():
    model = torch.nn.Linear(1, 1, dtype=torch.float64)
    with torch.no_grad():
        model.weight.fill_(1.0)
        model.bias.zero_()
    x = torch.tensor([[-2.0], [-1.0], [0.5], [3.0]], dtype=torch.float64)
    # logits -2, -1, 0.5, 3 -> predicted 0, 0, 1, 1; labels agree on three of four
    assert binary_accuracy(model, x, torch.tensor([0.0, 1.0, 1.0, 1.0],
                                                  dtype=torch.float64)) == 0.75
    with torch.no_grad():
        model.weight.fill_(math.inf)
    assert math.isnan(binary_accuracy(model, x, torch.zeros(4, dtype=torch.float64)))


def test_bad_inputs_give_clear_errors():
    data = [_data(s, torch.float64) for s in SEEDS]
    xs, ys = [x for x, _ in data], [y for _, y in data]
    kwargs = dict(lr=LR, batch_size=BATCH, epochs=1)
    with pytest.raises(ValueError, match="seeds: need one seed per model \\(3\\), got 2"):
        train_binary_sgd_ensemble(_models(torch.float64), xs, ys, seeds=[0, 1], **kwargs)
    with pytest.raises(ValueError, match="xs: need one tensor per seed \\(3\\), got 2"):
        train_binary_sgd_ensemble(_models(torch.float64), xs[:2], ys, seeds=SEEDS, **kwargs)
    with pytest.raises(ValueError, match="ys: need a leading seed dimension of 3"):
        train_binary_sgd_ensemble(_models(torch.float64), xs, torch.stack(ys)[:2], seeds=SEEDS,
                                  **kwargs)
    with pytest.raises(ValueError, match="xs: every seed's tensor must have the same shape"):
        train_binary_sgd_ensemble(_models(torch.float64), [xs[0], xs[1], xs[2][:50]], ys,
                                  seeds=SEEDS, **kwargs)
    with pytest.raises(ValueError, match="ys: need as many labels as xs has samples"):
        train_binary_sgd_ensemble(_models(torch.float64), xs, [y[:50] for y in ys],
                                  seeds=SEEDS, **kwargs)
    with pytest.raises(ValueError, match="models: need at least one"):
        train_binary_sgd_ensemble([], xs, ys, seeds=[], **kwargs)
    one = _models(torch.float64)[0]
    with pytest.raises(ValueError, match="models: every seed needs its own model object"):
        train_binary_sgd_ensemble([one, one, one], xs, ys, seeds=SEEDS, **kwargs)
    mixed = _models(torch.float64)[:2] + [deep_mlp(2, 8, 3, 1, seed=0)]
    with pytest.raises(ValueError, match="models: every model must have the same parameter"):
        train_binary_sgd_ensemble(mixed, xs, ys, seeds=SEEDS, **kwargs)
    with pytest.raises(ValueError, match="batch_size: must be >= 1"):
        train_binary_sgd_ensemble(_models(torch.float64), xs, ys, seeds=SEEDS, lr=LR,
                                  batch_size=0, epochs=1)
