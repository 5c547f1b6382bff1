"""Gaussian averages, gains and shifts against closed forms, scipy quadrature and published values."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import integrate
from scipy.special import ndtr

import actlab
import actlab.activations.spec
from actlab.theory import moments, shift
from actlab.theory.gaussian import Moments, expectation, gain

# Transcribed from the seed texts themselves (never from the code under test).
# The handbook page "Activations and initialization", "Averages over a Gaussian net input", z ~ N(0, 1):
# (mean, E[f^2], E[f'^2], gain), four decimals (leaky ReLU's moments five, as printed).
SEED_AVERAGES = {
    "sigmoid": (0.5000, 0.2934, 0.0448, 1.8462),
    "tanh": (0.0, 0.3943, 0.4644, 1.5925),
    "relu": (0.3989, 0.5000, 0.5000, 1.4142),
    "leaky_relu": (0.3950, 0.50005, 0.50005, 1.4141),
    "elu": (0.1605, 0.6449, 0.6681, 1.2452),
    "gelu": (0.2821, 0.4252, 0.4559, 1.5335),
    "silu": (0.2066, 0.3558, 0.3795, 1.6765),
    "softplus": (0.8061, 0.9212, 0.2934, 1.0419),
}
# "Rethinking Activation Functions", Table 1 (tanh from App. A): b = E f(Z), Z ~ N(0, 1/3).
SEED_SHIFTS = {"relu": 0.230, "gelu": 0.115, "swish": 0.077, "sigmoid": 0.500, "tanh": 0.000}


@pytest.mark.parametrize("name", sorted(SEED_AVERAGES))
def test_seed_gaussian_averages_to_four_decimals(name):
    got = moments(name)
    mean, second, slope, gain_ = SEED_AVERAGES[name]
    assert round(got.mean, 4) == mean
    assert round(got.gain, 4) == gain_
    if name == "leaky_relu":  # published with five decimals: (1 + 0.01²) / 2
        assert round(got.second_moment, 5) == second
        assert round(got.slope_second_moment, 5) == slope
    else:
        assert round(got.second_moment, 4) == second
        assert round(got.slope_second_moment, 4) == slope


def test_gallery_compares_against_the_seed_tables():
    # The gallery keeps its own copy for its report; it must be the published one.
    from actlab.experiments.gallery.summary import PUBLISHED_AVERAGES, PUBLISHED_SHIFTS

    assert PUBLISHED_AVERAGES == SEED_AVERAGES
    assert PUBLISHED_SHIFTS == SEED_SHIFTS


@pytest.mark.parametrize(("name", "published"), sorted(SEED_SHIFTS.items()))
def test_table_1_shifts_to_three_decimals(name, published):
    assert round(shift(name), 3) == published
    assert actlab.theory.shift(name, q=1 / 3) == shift(name)
    # the registry's shift=theory is the same number (one definition of the shift)
    assert actlab.activations.spec.theory_shift(name) == shift(name)
    assert actlab.activation(f"{name}:shift=theory").shift == shift(name)


def test_shift_closed_forms_of_appendix_a():
    assert shift("relu") == pytest.approx(1 / math.sqrt(6 * math.pi), abs=1e-14)  # eq. 16
    assert shift("gelu") == pytest.approx(1 / math.sqrt(24 * math.pi), abs=1e-14)  # eq. 17
    assert shift("sigmoid") == pytest.approx(0.5, abs=1e-14)  # eq. 20


def _phi(x: float) -> float:
    return float(ndtr(x))


@pytest.mark.parametrize("q", [0.01, 1 / 3, 1.0, 4.0, 30.0])
def test_closed_forms_to_1e12(q):
    s = math.sqrt(q)
    relu = moments("relu", q)
    assert relu.mean == pytest.approx(s / math.sqrt(2 * math.pi), abs=1e-12)
    assert relu.second_moment == pytest.approx(q / 2, abs=1e-12 * max(1, q))
    assert relu.slope_second_moment == pytest.approx(0.5, abs=1e-12)
    a = 0.2
    leaky = moments("leaky_relu:slope=0.2", q)
    assert leaky.mean == pytest.approx((1 - a) * s / math.sqrt(2 * math.pi), abs=1e-12)
    assert leaky.second_moment == pytest.approx((1 + a * a) * q / 2, abs=1e-12 * max(1, q))
    assert leaky.slope_second_moment == pytest.approx((1 + a * a) / 2, abs=1e-12)
    # GELU: E[z Φ(z)] = q E[φ(z)] by Stein's lemma.
    assert moments("gelu", q).mean == pytest.approx(
        q / math.sqrt(2 * math.pi * (1 + q)), abs=1e-12
    )
    # ELU (alpha 1) from E[e^{cz}; z < 0] = e^{c²q/2} Φ(-c√q).
    e1 = math.exp(q / 2) * _phi(-s)
    e2 = math.exp(2 * q) * _phi(-2 * s)
    elu = moments("elu", q)
    assert elu.mean == pytest.approx(s / math.sqrt(2 * math.pi) + e1 - 0.5, abs=1e-12)
    assert elu.second_moment == pytest.approx(q / 2 + e2 - 2 * e1 + 0.5, abs=1e-12 * max(1, q))
    assert elu.slope_second_moment == pytest.approx(0.5 + e2, abs=1e-12)
    assert moments("identity", q).second_moment == pytest.approx(q, abs=1e-12 * max(1, q))
    assert moments("relu2", q).mean == pytest.approx(q / 2, abs=1e-12 * max(1, q))


def _quad(function, q: float) -> float:
    """E function(z) by scipy's adaptive quadrature, split at 0, at tight tolerance."""
    s = math.sqrt(q)

    def integrand(t: float) -> float:
        return function(s * t) * math.exp(-t * t / 2) / math.sqrt(2 * math.pi)

    return sum(
        integrate.quad(integrand, lo, hi, epsabs=1e-13, epsrel=1e-12, limit=400)[0]
        for lo, hi in ((-40.0, 0.0), (0.0, 40.0))
    )


def _sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x)) if x >= 0 else math.exp(x) / (1 + math.exp(x))


SMOOTH = {
    "sigmoid": (_sigmoid, lambda x: _sigmoid(x) * (1 - _sigmoid(x))),
    "tanh": (math.tanh, lambda x: 1 - math.tanh(x) ** 2),
    "silu": (lambda x: x * _sigmoid(x), lambda x: _sigmoid(x) * (1 + x * (1 - _sigmoid(x)))),
    "softplus": (lambda x: max(x, 0) + math.log1p(math.exp(-abs(x))), _sigmoid),
}


@pytest.mark.parametrize("name", sorted(SMOOTH))
@pytest.mark.parametrize("q", [0.1, 1.0, 9.0])
def test_smooth_activations_against_scipy_quad(name, q):
    f, df = SMOOTH[name]
    got = moments(name, q)
    assert got.mean == pytest.approx(_quad(f, q), abs=1e-10)
    assert got.second_moment == pytest.approx(_quad(lambda x: f(x) ** 2, q), abs=1e-10)
    assert got.slope_second_moment == pytest.approx(_quad(lambda x: df(x) ** 2, q), abs=1e-10)


def test_gain_is_at_unit_variance_whatever_q():
    assert moments("tanh", 5.0).gain == moments("tanh", 1.0).gain == gain("tanh")
    assert moments("relu", 0.2).gain == pytest.approx(math.sqrt(2), abs=1e-12)


def test_result_is_a_dict_and_an_object():
    result = moments("gelu", 0.5)
    assert isinstance(result, Moments)
    assert list(result.as_dict()) == ["mean", "second_moment", "slope_second_moment", "gain"]
    assert result["gain"] == result.gain
    assert dict(result) == result.as_dict()


def test_shift_theory_spec_is_centred_at_its_q():
    assert moments("gelu:shift=theory", 1 / 3).mean == pytest.approx(0.0, abs=1e-14)
    assert moments("relu:shift=theory:q=2", 2.0).mean == pytest.approx(0.0, abs=1e-14)
    assert moments("relu:shift=0.5", 1.0).mean == pytest.approx(
        1 / math.sqrt(2 * math.pi) - 0.5, abs=1e-14
    )
    # The module built from the spec subtracts the same number.
    module = actlab.activation("silu:shift=theory")
    assert float(module(torch.zeros(1))) == pytest.approx(-shift("silu"), abs=1e-7)


def test_clip_kink_away_from_zero_still_converges():
    # min(relu(z), 1): E = E[z; 0<z<1] + P(z > 1), closed form for q = 1.
    got = moments("relu:clip=1", 1.0)
    expected = (1 / math.sqrt(2 * math.pi)) * (1 - math.exp(-0.5)) + (1 - _phi(1.0))
    assert got.mean == pytest.approx(expected, abs=1e-11)
    assert got.slope_second_moment == pytest.approx(_phi(1.0) - 0.5, abs=1e-11)


@pytest.fixture
def registered():
    names = []

    def add(name, fn, derivative=None, **defaults):
        actlab.register_activation(name, fn, derivative, overwrite=True, **defaults)
        names.append(name)

    yield add
    for name in names:  # keep the global registry as other tests expect it
        actlab.activations.spec.unregister_activation(name)


def test_user_activation_with_autograd_derivative(registered):
    registered("cubic_test", lambda x: x**3 - x)
    for q in (0.5, 2.0):
        got = moments("cubic_test", q)
        assert got.mean == pytest.approx(0.0, abs=1e-12)
        assert got.second_moment == pytest.approx(15 * q**3 - 6 * q**2 + q, rel=1e-12)
        assert got.slope_second_moment == pytest.approx(27 * q**2 - 6 * q + 1, rel=1e-12)


def test_user_activation_without_torch_autograd_uses_finite_differences(registered):
    def numpy_sine(x):  # not differentiable by autograd: goes through NumPy
        return torch.from_numpy(np.sin(x.detach().numpy()))

    registered("numpy_sine_test", numpy_sine)
    q = 1.5
    got = moments("numpy_sine_test", q)
    assert got.second_moment == pytest.approx((1 - math.exp(-2 * q)) / 2, abs=1e-12)
    assert got.slope_second_moment == pytest.approx((1 + math.exp(-2 * q)) / 2, abs=1e-9)


def test_user_activation_with_its_own_parameter(registered):
    registered("scaled_relu_test", lambda x, a: a * torch.relu(x), a=2.0)
    assert moments("scaled_relu_test:a=3").second_moment == pytest.approx(4.5, abs=1e-12)


def test_q_zero_is_the_value_at_zero():
    got = moments("softplus", 0.0)
    assert got.mean == pytest.approx(math.log(2), abs=1e-15)
    assert got.slope_second_moment == pytest.approx(0.25, abs=1e-15)


def test_bad_input_raises_value_error():
    with pytest.raises(ValueError, match="q"):
        moments("relu", -1.0)
    with pytest.raises(ValueError, match="q"):
        moments("relu", float("nan"))
    with pytest.raises(ValueError, match="adaptive"):
        moments("gelu:adaptive")
    with pytest.raises(ValueError, match="topk"):
        shift("gelu:topk=0.1")
    with pytest.raises(ValueError, match="gelu"):
        moments("gelux")


def test_expectation_of_a_plain_function():
    assert expectation(lambda z: z**4, 2.0) == pytest.approx(3 * 4.0, rel=1e-13)
