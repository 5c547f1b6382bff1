"""The vmapped ensemble version of the spirals' plain SGD against a loop of the reference."""

from __future__ import annotations

import math

import pytest
import torch

from actlab.data.spirals import data_seed, two_spirals
from actlab.experiments.dead_units import DeadUnitsExperiment
from actlab.experiments.init_study import InitStudyExperiment, build_model
from actlab.nn.deep_mlp import deep_mlp
from actlab.runner.config import build_config
from actlab.runner.experiment import UnitContext
from actlab.train.binary import BinaryRun, train_binary_sgd, train_binary_sgd_ensemble

SEEDS = (0, 1, 2)
# 70 points in batches of 20: the last partial batch (10 points) is dropped every epoch.
N_TRAIN, BATCH, EPOCHS, LR = 70, 20, 4, 0.1


def _data(seed: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = two_spirals(N_TRAIN, seed=data_seed(seed, 0))
    return x.to(dtype), y.to(dtype)


def _models(dtype: torch.dtype, activation: str = "tanh") -> list[torch.nn.Module]:
    return [deep_mlp(2, 16, 3, 1, activation=activation, scheme="xavier", seed=s, dtype=dtype)
            for s in SEEDS]


def _loop(models, data, **kwargs) -> list[BinaryRun]:
    return [train_binary_sgd(m, x, y, seed=data_seed(s, 2), **kwargs)
            for m, (x, y), s in zip(models, data, SEEDS)]


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


def test_diverging_members_stop_alone_the_others_finish_as_in_their_loop_runs():
    # 20-layer ReLU stacks: He's gain trains; twice its variance (gain 2, relu-1.41he in the
    # init study) overflows. At this learning rate seed 1 overflows in a mini-batch of epoch
    # 2 and seed 2 in its whole-set cost after epoch 1 (its mini-batch costs stay finite):
    # both ways of stopping, next to two members that train on.
    seeds, gains = (0, 1, 2, 3), (None, 2.0, 2.0, None)

    def models():
        return [deep_mlp(2, 16, 20, 1, activation="relu", scheme="he", seed=s, gain=g)
                for s, g in zip(seeds, gains)]

    data = [_data(s, torch.float64) for s in seeds]
    loop_models, ens_models = models(), models()
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


def _rows_by_key(rows) -> dict:
    return {row[:5]: row[5] for row in rows}


def _assert_rows_close(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key, value in a.items():
        other = b[key]
        assert (math.isnan(value) and math.isnan(other)) or other == pytest.approx(
            value, rel=1e-12, abs=1e-15), key


def test_init_study_unit_of_all_seeds_equals_units_of_one_seed(tmp_path):
    exp = InitStudyExperiment()
    assert exp.seeds_per_unit is None  # the runner hands all seeds to one unit
    config = build_config(exp.Config, {"configurations": "relu-1.41he,tanh-xavier",
                                       "n_train": 40, "n_test": 40, "epochs": 2,
                                       "late_window": 1})
    ctx = UnitContext(workdir=tmp_path)
    for unit in exp.units(config):
        together = exp.run_unit(config, unit, [0, 1], ctx)
        alone = [exp.run_unit(config, unit, [s], ctx) for s in (0, 1)]
        _assert_rows_close(_rows_by_key(together.rows),
                           _rows_by_key(alone[0].rows + alone[1].rows))
        # rows come seed by seed, as the loop wrote them
        assert [r[1] for r in together.rows] == sorted(r[1] for r in together.rows)
        if unit["configuration"] == "relu-1.41he":  # every seed overflows: a failure is data
            assert together.status == "diverged" and "[0, 1]" in together.error
        else:
            assert together.status == "ok" and together.error is None
    # a member of the ensemble trains as its loop run does (the reference)
    model = build_model(config, "tanh-xavier", 1)
    from actlab.experiments.init_study import spiral_sets

    (x, y), _ = spiral_sets(config, 1)
    run = train_binary_sgd(model, x, y, lr=config.lr, batch_size=config.batch_size, epochs=2,
                           seed=data_seed(1, 2))
    rows = _rows_by_key(together.rows)
    for epoch, cost in enumerate(run.costs):
        assert rows[("tanh-xavier", 1, epoch, "", "cost")] == pytest.approx(cost, rel=1e-12)


def test_dead_units_unit_of_all_seeds_equals_units_of_one_seed(tmp_path):
    exp = DeadUnitsExperiment()
    assert exp.seeds_per_unit is None
    config = build_config(exp.Config, {"epochs": 3, "hidden": 32})
    ctx = UnitContext(workdir=tmp_path)
    unit = {"part": "shallow", "run": "relu-lr4"}
    together = exp.run_unit(config, unit, [0, 1], ctx)
    alone = [exp.run_unit(config, unit, [s], ctx) for s in (0, 1)]
    rows = _rows_by_key(together.rows)
    _assert_rows_close(rows, _rows_by_key(alone[0].rows + alone[1].rows))
    # every epoch 0..3 has its dead share and cost for both seeds
    for seed in (0, 1):
        for epoch in range(4):
            assert 0.0 <= rows[("relu-lr4", seed, epoch, "", "dead_share")] <= 1.0
            assert math.isfinite(rows[("relu-lr4", seed, epoch, "", "cost")])
