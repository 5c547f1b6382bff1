"""The worked example of the handbook page, value by value (numbers typed from the page)."""

from __future__ import annotations

import pytest

from actlab.experiments.worked_example import (
    WorkedExampleExperiment,
    format_worked_example,
    worked_example_values,
)
from actlab.runner.experiment import RunContext, UnitContext

TOL = 5e-5  # the page shows four decimals


@pytest.fixture(scope="module")
def values():
    return worked_example_values()


def test_linear_collapse(values):
    lc = values["linear_collapse"]
    assert lc["collapsed_weight"] == pytest.approx([0.0, -4.5], abs=1e-12)
    assert lc["collapsed_bias"] == pytest.approx(2.5, abs=1e-12)
    assert lc["hidden_net_inputs"] == pytest.approx([-2.5, 1.5, -0.5], abs=1e-12)
    assert lc["two_layer_output"] == pytest.approx(-6.5, abs=1e-12)
    assert lc["collapsed_output"] == pytest.approx(-6.5, abs=1e-12)
    assert lc["relu_hidden_activations"] == pytest.approx([0.0, 1.5, 0.0], abs=1e-12)
    assert lc["relu_output"] == pytest.approx(-1.0, abs=1e-12)


PAGE = {
    "sigmoid": ([0.1824, 0.5000, 0.6225], [0.1491, 0.2500, 0.2350]),
    "tanh": ([-0.9051, 0.0, 0.4621], [0.1807, 1.0, 0.7864]),
    "relu": ([0.0, 0.0, 0.5], [0.0, 0.0, 1.0]),
    "leaky_relu": ([-0.0150, 0.0, 0.5], [0.0100, 0.0100, 1.0]),
    "elu": ([-0.7769, 0.0, 0.5], [0.2231, 1.0, 1.0]),
    "gelu": ([-0.1002, 0.0, 0.3457], [-0.1275, 0.5, 0.8675]),
    "silu": ([-0.2736, 0.0, 0.3112], [-0.0413, 0.5, 0.7400]),
    "softplus": ([0.2014, 0.6931, 0.9741], [0.1824, 0.5, 0.6225]),
}


@pytest.mark.parametrize("name", sorted(PAGE))
def test_activations_at_three_points(values, name):
    entry = values["activations"][name]
    assert entry["values"] == pytest.approx(PAGE[name][0], abs=TOL)
    assert entry["slopes"] == pytest.approx(PAGE[name][1], abs=TOL)


def test_sigmoid_chain(values):
    c = values["chain_sigmoid"]
    assert c["net_inputs"] == pytest.approx([1.0, 0.5966, 0.8739, 0.4111], abs=TOL)
    assert c["activations"][:3] == pytest.approx([0.7311, 0.6449, 0.7055], abs=TOL)
    assert c["slopes"][:3] == pytest.approx([0.1966, 0.2290, 0.2078], abs=TOL)
    assert c["errors"] == pytest.approx([-0.0198, -0.0672, -0.2447, -0.5889], abs=TOL)
    assert c["weight_gradients"] == pytest.approx([-0.0198, -0.0492, -0.1578, -0.4155], abs=TOL)
    assert c["cost"] == pytest.approx(0.1734, abs=TOL)
    assert c["first_over_output_error"] == pytest.approx(0.0337, abs=TOL)


def test_relu_chain_and_the_switched_off_unit(values):
    c = values["chain_relu"]
    assert c["net_inputs"] == pytest.approx([1.0, 1.0, 1.3, 1.6], abs=1e-12)
    assert c["errors"] == pytest.approx([2.16, 1.44, 1.2, 0.6], abs=1e-12)
    assert c["weight_gradients"] == pytest.approx([2.16, 1.44, 1.2, 0.78], abs=1e-12)
    assert c["cost"] == pytest.approx(0.18, abs=1e-12)
    assert c["first_over_output_error"] == pytest.approx(3.6, abs=1e-12)
    d = values["chain_relu_dead"]
    assert d["net_inputs"][1] == pytest.approx(-0.5, abs=1e-12)
    assert d["net_inputs"][3] == pytest.approx(-0.8, abs=1e-12)
    assert d["cost"] == pytest.approx(1.62, abs=1e-12)
    assert d["errors"] == pytest.approx([0.0, 0.0, -3.6, -1.8], abs=1e-12)
    assert d["weight_gradients"][:3] == [0.0, 0.0, 0.0]


def test_initial_scales(values):
    s = values["initial_scales"]
    assert s["xavier"]["variance"] == pytest.approx(0.005, abs=1e-12)
    assert s["xavier"]["std"] == pytest.approx(0.0707, abs=TOL)
    assert s["xavier"]["uniform_bound"] == pytest.approx(0.1225, abs=TOL)
    assert s["he"]["std"] == pytest.approx(0.0816, abs=TOL)
    assert s["he"]["uniform_bound"] == pytest.approx(0.1414, abs=TOL)
    assert s["torch-default"]["std"] == pytest.approx(1 / 30, abs=1e-12)
    assert s["torch-default"]["uniform_bound"] == pytest.approx(0.0577, abs=TOL)
    assert [s[k]["net_input_variance"] for k in ("xavier", "he", "torch-default")] == \
        pytest.approx([1.5, 2.0, 1 / 3], abs=1e-12)
    assert [s[k]["relu_second_moment"] for k in ("xavier", "he", "torch-default")] == \
        pytest.approx([0.75, 1.0, 1 / 6], abs=1e-12)
    assert [s[k]["square_relu_layer_factor"] for k in ("he", "xavier", "torch-default")] == \
        pytest.approx([1.0, 0.5, 1 / 6], abs=1e-12)
    assert s["xavier"]["variance_after_10_layers"] == pytest.approx(0.0010, abs=TOL)
    assert s["torch-default"]["variance_after_10_layers"] == pytest.approx(1.65e-8, rel=0.005)
    assert s["xavier"]["std_after_10_layers"] == pytest.approx(0.03125, abs=1e-12)
    assert s["torch-default"]["std_after_10_layers"] == pytest.approx(1.28e-4, rel=0.005)


def test_experiment_prints_every_value_and_claims_hold(tmp_path, capsys):
    exp = WorkedExampleExperiment()
    config = exp.Config()
    result = exp.run_unit(config, {}, [0], UnitContext(workdir=tmp_path))
    summary = exp.summarize(config, None, [{"data": result.data}],
                            RunContext(out_dir=tmp_path, figures_dir=tmp_path / "figures"))
    printed = capsys.readouterr().out
    assert printed.strip() == format_worked_example(summary).strip()
    for text in ("-0.1275", "0.5966", "-0.5889", "0.1734", "2.1600", "0.7800", "1.6200",
                 "0.0707", "0.1225", "0.1414", "1.2860e-04"):
        assert text in printed
    claims = exp.claims(summary)
    assert len(claims) >= 15
    assert all(c.held for c in claims), [c for c in claims if not c.held]
