"""Dead-unit counting (exact over the set vs one batch) and the learning-rate mechanism."""

from __future__ import annotations

import math

import pytest
import torch

from actlab.data.spirals import data_seed, two_spirals
from actlab.experiments.dead_units import DeadUnitsExperiment, dead_shares
from actlab.experiments.dead_units.claims import claims
from actlab.nn.deep_mlp import deep_mlp
from actlab.recipes.spirals import train_binary_sgd
from actlab.runner.config import build_config
from actlab.runner.experiment import UnitContext


def test_dead_shares_on_a_hand_built_layer():
    model = deep_mlp(2, 4, 1, 1, activation="relu", scheme="he", seed=0)
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [-1.0, 0.5]], dtype=torch.float64)
    with torch.no_grad():
        model.hidden[0].weight.copy_(torch.tensor([[-1.0, -1.0],   # off on the first three
                                                   [1.0, 0.0],     # on for examples 1 and 3
                                                   [0.0, -1.0],    # never on: dead
                                                   [0.0, 1.0]], dtype=torch.float64))
        model.hidden[0].bias.zero_()
    shares = dead_shares(model, x, batch_size=2)
    # unit 0 fires on (-1, 0.5) only, unit 2 never: one dead unit of four
    assert shares["total"] == pytest.approx(0.25)
    assert shares["inactive_total"] == pytest.approx(0.25)
    # batch 1 (first two examples): units 0 and 2 silent; batch 2: unit 2 only. The mean of
    # the per-batch shares overstates the exact share.
    assert shares["per_layer_batch"][0] >= shares["per_layer"][0]
    assert shares["per_layer_batch"][0] == pytest.approx((2 / 4 + 1 / 4) / 2)


def test_leaky_relu_has_no_dead_units_even_when_inactive():
    model = deep_mlp(2, 3, 1, 1, activation="leaky_relu", scheme="he", seed=0)
    with torch.no_grad():
        model.hidden[0].weight.fill_(-1.0)
        model.hidden[0].bias.fill_(-5.0)
    x = torch.rand(10, 2, dtype=torch.float64)
    shares = dead_shares(model, x, batch_size=5)
    assert shares["total"] == 0.0 and shares["inactive_total"] == 1.0


def test_large_learning_rate_kills_relu_units_small_one_does_not():
    config = DeadUnitsExperiment.Config()
    x, y = two_spirals(300, seed=data_seed(0))
    result = {}
    for lr in (config.lr_large, config.lr_small):
        model = deep_mlp(2, 128, 1, 1, activation="relu", scheme="he", seed=0)
        assert dead_shares(model, x, 20)["total"] == 0.0  # nothing dead at the start
        train_binary_sgd(model, x, y, lr=lr, batch_size=20, epochs=1, seed=data_seed(0, 2))
        result[lr] = dead_shares(model, x, 20)["total"]
    assert result[config.lr_large] > 0.2  # the handbook: 62% after one epoch
    assert result[config.lr_small] == 0.0


def test_fresh_deep_stack_has_dead_units_and_one_batch_overstates():
    x, _ = two_spirals(300, seed=data_seed(0))
    model = deep_mlp(2, 32, 20, 1, activation="relu", scheme="he", seed=0)
    shares = dead_shares(model, x, 20)
    assert 0.05 < shares["total"] < 0.6  # the handbook: 22.7%
    assert shares["per_layer"][0] == 0.0  # first layer reads the data, which spans all angles
    # by construction (a unit silent on the whole set is silent on every batch): a test
    assert all(b >= f for b, f in zip(shares["per_layer_batch"], shares["per_layer"]))


def test_by_construction_dead_share_never_falls_and_leaky_relu_has_none(tmp_path):
    # One hidden layer, plain SGD: a unit dead on the whole set gets zero gradient from every
    # batch, so the dead share can only grow; leaky ReLU's output is never exactly zero. Both
    # are tests, not claims.
    exp = DeadUnitsExperiment()
    config = build_config(exp.Config, {"epochs": 6})
    ctx = UnitContext(workdir=tmp_path)
    for run in ("relu-lr4", "leaky_relu-lr4"):
        rows = _rows_by_key(exp.run_unit(config, {"part": "shallow", "run": run}, [0, 1],
                                         ctx).rows)
        for seed in (0, 1):
            shares = [rows[(run, seed, epoch, "", "dead_share")] for epoch in range(7)]
            if run == "relu-lr4":
                assert shares[-1] > 0.2  # units do die at lr 4
                assert all(b >= a for a, b in zip(shares, shares[1:])), shares
            else:
                assert shares == [0.0] * 7
                assert rows[(run, seed, 6, "", "inactive_share")] > 0.0  # inactive, not dead


def _summary(**deep) -> dict:
    shallow = {"dead_share_epoch1": 0.6, "dead_share_epoch30": 0.75, "final_cost": 0.45,
               "inactive_share_last": 0.6}
    return {"epochs": 30, "shallow": {
        "relu-lr4": {"mean": shallow},
        "relu-lr0.5": {"mean": dict(shallow, dead_share_epoch1=0.0, dead_share_epoch30=0.0)},
        "leaky_relu-lr4": {"mean": dict(shallow, dead_share_epoch1=0.0,
                                        dead_share_epoch30=0.0, final_cost=0.36)}},
        "deep": {"mean": {"dead_share": 0.227, "last_layer_full": 0.41,
                          "last_layer_one_batch": 0.44, **deep}}}


def test_claims_judge_what_can_fail():
    held = {c.id: c.held for c in claims(_summary())}
    assert all(held.values()), held
    # equal estimates are not an overstatement (the strict part of the claim)
    same = {c.id: c.held for c in claims(_summary(last_layer_one_batch=0.41))}
    assert same["dead-units/deep/one-batch-overstates-dead-share"] is False
    summary = _summary()
    summary["shallow"]["leaky_relu-lr4"]["mean"]["final_cost"] = 0.5
    assert {c.id: c.held for c in claims(summary)}[
        "dead-units/leaky-relu-lr4/loses-none-lower-cost"] is False
    assert not any(c.deterministic for c in claims(summary))


def _rows_by_key(rows) -> dict:
    return {row[:5]: row[5] for row in rows}


def _assert_rows_close(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key, value in a.items():
        other = b[key]
        assert (math.isnan(value) and math.isnan(other)) or other == pytest.approx(
            value, rel=1e-12, abs=1e-15), key


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


@pytest.mark.parametrize("overrides, message", [
    ({"hidden": 0}, "hidden: must be >= 1, got 0"),
    ({"lr_large": -1.0}, "lr_large: must be > 0, got -1.0"),
    ({"input_scale": "unti"}, "input_scale: must be one of unit, radius, got 'unti'; did you "
                              "mean unit?"),
    ({"batch_size": 400}, r"batch_size: must be <= n_train \(300\)"),
])
def test_config_errors_name_the_field(overrides, message):
    from actlab.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        DeadUnitsExperiment.Config(**overrides)


def test_runs_are_named_by_the_rates_they_train_at():
    from actlab.errors import ConfigError
    from actlab.experiments.dead_units import DeadUnitsConfig, DeadUnitsExperiment

    default = DeadUnitsExperiment().units(DeadUnitsConfig())
    assert [u.get("run") for u in default] == ["relu-lr4", "relu-lr0.5", "leaky_relu-lr4", None]
    changed = DeadUnitsExperiment().units(DeadUnitsConfig(lr_large=2.0, lr_small=0.1))
    assert [u.get("run") for u in changed][:3] == ["relu-lr2", "relu-lr0.1", "leaky_relu-lr2"]
    with pytest.raises(ConfigError, match="must differ") as err:
        DeadUnitsConfig(lr_large=0.5)
    assert err.value.field == "lr_small"
