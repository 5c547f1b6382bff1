"""The sample project's classification, training loop and experiment plumbing."""

from __future__ import annotations

import math

import pytest
import torch

from actlab.data.spirals import data_seed
from actlab.errors import ConfigError
from actlab.experiments.init_study import (
    CONFIGURATIONS,
    InitStudyExperiment,
    build_model,
    spiral_sets,
)
from actlab.experiments.init_study.summary import (
    classify_late_cost,
    configuration_verdict,
    late_cost,
)
from actlab.recipes.spirals import train_binary_sgd
from actlab.runner.config import build_config
from actlab.runner.experiment import UnitContext

from _inline_run import run_inline

LN2 = math.log(2)


def test_classification_boundaries():
    assert classify_late_cost(LN2 / 2 - 1e-9) == "trains"
    assert classify_late_cost(LN2 / 2) == "learns slowly"
    assert classify_late_cost(LN2 - 0.0099) == "stalls at chance"
    assert classify_late_cost(LN2 + 0.0099) == "stalls at chance"
    assert classify_late_cost(LN2 - 0.02) == "learns slowly"
    assert classify_late_cost(1.5) == "learns slowly"
    assert classify_late_cost(math.inf) == "diverges"
    assert classify_late_cost(math.nan) == "diverges"


def test_late_cost_is_the_median_of_the_window_and_overflow_is_inf():
    costs = [0.9, 0.8, 0.1, 0.5, 0.3]
    assert late_cost(costs, 3) == 0.3
    assert late_cost([0.5, math.nan, 0.4], 1) == math.inf
    # the configuration takes the median over seeds; one overflow does not decide it
    assert configuration_verdict([0.1, math.inf, 0.2]) == "trains"
    assert configuration_verdict([math.inf, math.inf, 0.2]) == "diverges"
    assert configuration_verdict([0.69, 0.6931, 0.2]) == "stalls at chance"


def test_ten_configurations_with_the_published_names():
    assert list(CONFIGURATIONS) == ["relu-default", "relu-xavier", "relu-he", "relu-1.41he",
                                    "sigmoid-xavier", "tanh-xavier", "tanh-xavier-5/3",
                                    "elu-he", "silu-he", "silu-gain1.68"]
    config = InitStudyExperiment.Config()
    he = build_model(config, "relu-he", 0).hidden[5].weight.detach()
    big = build_model(config, "relu-1.41he", 0).hidden[5].weight.detach()
    default = build_model(config, "relu-default", 0).hidden[5].weight.detach()
    silu = build_model(config, "silu-gain1.68", 0).hidden[5].weight.detach()
    assert torch.allclose(big, math.sqrt(2) * he)  # same draws, sqrt(2) x He's std
    assert torch.allclose(default, he / math.sqrt(6))  # a sixth of He's variance
    assert torch.allclose(silu, he * 1.6765 / math.sqrt(2), rtol=1e-4)


def test_unknown_configuration_is_a_config_error_with_suggestion():
    with pytest.raises(ConfigError, match="relu-he"):
        build_config(InitStudyExperiment.Config, {"configurations": "relu-hee"})
    with pytest.raises(ConfigError, match=r"late_window: must be <= epochs \(5\)"):
        build_config(InitStudyExperiment.Config, {"epochs": 5, "late_window": 6})
    with pytest.raises(ConfigError, match="configurations: needs at least one value"):
        InitStudyExperiment.Config(configurations=())
    with pytest.raises(ConfigError, match="lr: must be > 0, got 0.0"):
        InitStudyExperiment.Config(lr=0.0)
    with pytest.raises(ConfigError, match="input_scale: must be one of unit, radius"):
        InitStudyExperiment.Config(input_scale="radial")


def _run(exp, config, seeds, tmp_path):
    summary, _, results = run_inline(exp, config, tmp_path, [[seed] for seed in seeds])
    return summary, results


def test_overflow_is_recorded_as_diverged_not_raised(tmp_path):
    exp = InitStudyExperiment()
    config = build_config(exp.Config, {"configurations": "relu-1.41he", "epochs": 2,
                                       "late_window": 1})
    summary, results = _run(exp, config, [0], tmp_path)
    assert results[0]["status"] == "diverged"
    entry = summary["relu-1.41he"]
    assert entry["initial_cost"][0] > 10  # the handbook: 523.9 at this scale
    assert entry["verdict"] == "diverges" and entry["late_costs"] == [None]
    assert entry["test_accuracy"] is None


def test_plain_loop_equals_torch_sgd_by_hand():
    config = build_config(InitStudyExperiment.Config, {"depth": 3, "width": 8, "n_train": 40})
    (x, y), _ = spiral_sets(config, 1)
    model = build_model(config, "tanh-xavier", 1)
    reference = build_model(config, "tanh-xavier", 1)
    run = train_binary_sgd(model, x, y, lr=0.1, batch_size=20, epochs=2, seed=7)
    generator = torch.Generator().manual_seed(7)
    for _ in range(2):
        order = torch.randperm(40, generator=generator)
        for start in (0, 20):
            idx = order[start:start + 20]
            reference.zero_grad()
            torch.nn.functional.binary_cross_entropy_with_logits(
                reference(x[idx]).reshape(-1), y[idx]).backward()
            with torch.no_grad():
                for p in reference.parameters():
                    p -= 0.1 * p.grad
    for p, q in zip(model.parameters(), reference.parameters()):
        assert torch.allclose(p, q, atol=1e-14)
    assert len(run.costs) == 3 and not run.diverged


def test_experiment_small_scale_summary_keys(tmp_path):
    exp = InitStudyExperiment()
    config = build_config(exp.Config, {"configurations": "relu-he,sigmoid-xavier", "depth": 4,
                                       "width": 8, "n_train": 40, "n_test": 40, "epochs": 4,
                                       "late_window": 2})
    summary, _ = _run(exp, config, [0, 1], tmp_path)
    for name in ("relu-he", "sigmoid-xavier"):
        entry = summary[name]
        assert set(entry) >= {"verdict", "late_costs", "test_accuracy"}
        assert len(entry["late_costs"]) == 2 and 0 <= entry["test_accuracy"] <= 1
        assert len(entry["grad_norms_before_seed0"]) == 5
    assert not summary["protocol"]["comparable_with_handbook"]
    assert all(c.held is None for c in exp.claims(summary))  # shortened protocol decides nothing
    assert (tmp_path / "figures" / "init_study_costs.png").exists()


def test_gradient_norms_before_training_follow_the_depth_rule():
    from actlab.measure.signal import logistic_cross_entropy, weight_grad_norms

    config = InitStudyExperiment.Config()
    (x, y), _ = spiral_sets(config, 0)
    first = {}
    for name in ("relu-he", "relu-xavier", "relu-default", "relu-1.41he", "sigmoid-xavier"):
        norms = weight_grad_norms(build_model(config, name, 0), x, y, cost=logistic_cross_entropy)
        assert len(norms) == 21
        first[name] = norms[0]
    he = first["relu-he"]
    # c^(L-1) with L = 21 weight layers: Xavier 2^-10, default 6^-10, sqrt(2) x He 2^10
    assert 2.0**-10 / 3 < first["relu-xavier"] / he < 3 * 2.0**-10
    assert 6.0**-10 / 10 < first["relu-default"] / he < 10 * 6.0**-10
    assert 2.0**10 / 3 < first["relu-1.41he"] / he < 3 * 2.0**10
    assert first["sigmoid-xavier"] < 1e-12  # the handbook: 7.35e-14


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
    (x, y), _ = spiral_sets(config, 1)
    run = train_binary_sgd(model, x, y, lr=config.lr, batch_size=config.batch_size, epochs=2,
                           seed=data_seed(1, 2))
    rows = _rows_by_key(together.rows)
    for epoch, cost in enumerate(run.costs):
        assert rows[("tanh-xavier", 1, epoch, "", "cost")] == pytest.approx(cost, rel=1e-12)
