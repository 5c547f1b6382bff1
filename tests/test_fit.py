"""The sparsity-cliff power-law fit."""

from __future__ import annotations

import numpy as np
import pytest

from actlab.theory.fit import cliff_point, fit_cliff, normalize_by_group, r_squared


def test_fit_recovers_published_shape_from_noiseless_points():
    s = np.linspace(0.0, 0.98, 40)
    a = 0.978 - 0.635 * s**16.72  # the seed's published fit
    fit = fit_cliff(s, a)
    assert fit.A == pytest.approx(0.978, abs=1e-4)
    assert fit.B == pytest.approx(0.635, rel=1e-3)
    assert fit.N == pytest.approx(16.72, rel=1e-3)
    assert fit.r2 == pytest.approx(1.0, abs=1e-9)
    # the cliff is where the curve is 10% below A
    assert fit.predict(fit.cliff_sparsity) == pytest.approx(0.9 * fit.A, rel=1e-6)
    assert 0.8 < fit.cliff_sparsity < 0.95


def test_fit_with_noise_and_r2_matches_definition():
    rng = np.random.default_rng(0)
    s = rng.uniform(0, 1, 80)
    a = 0.95 - 0.5 * s**6 + rng.normal(0, 0.02, 80)
    fit = fit_cliff(s, a)
    assert fit.N == pytest.approx(6, rel=0.3)
    resid = a - fit.predict(s)
    assert fit.r2 == pytest.approx(1 - resid.var() * len(a) / ((a - a.mean()) ** 2).sum(), rel=1e-9)
    assert r_squared(a, np.full_like(a, a.mean())) == pytest.approx(0.0)


def test_cliff_point_edge_cases_and_errors():
    assert cliff_point(1.0, 0.05, 3.0) is None  # never drops 10%
    assert cliff_point(1.0, 1.0, 1.0) == pytest.approx(0.1)
    with pytest.raises(ValueError, match="at least 3"):
        fit_cliff([0.1, 0.2], [1.0, 0.9])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        fit_cliff([0.1, 0.2, 1.5], [1.0, 0.9, 0.8])


def test_normalize_by_group_divides_by_group_max():
    out = normalize_by_group([0.5, 1.0, 0.2, 0.4], ["a", "a", "b", "b"])
    np.testing.assert_allclose(out, [0.5, 1.0, 0.5, 1.0])


def test_indicator_fit_recovers_an_offset_per_mechanism():
    from actlab.theory.fit import fit_cliff_indicator

    s = np.tile(np.linspace(0.0, 0.98, 30), 2)
    m = np.repeat([0.0, 1.0], 30)
    a = 0.95 - 0.6 * s**8 - 0.07 * m  # Top-K points 0.07 lower at every sparsity
    fit = fit_cliff_indicator(s, a, m)
    assert (fit.A, fit.B, fit.N, fit.C) == pytest.approx((0.95, 0.6, 8.0, -0.07), rel=1e-3)
    assert fit.r2 == pytest.approx(1.0, abs=1e-9)
    plain = fit_cliff(s, a)
    assert plain.r2 < 0.99  # the power law alone cannot place both curves


def test_indicator_fit_nests_the_power_law():
    from actlab.theory.fit import fit_cliff_indicator

    rng = np.random.default_rng(1)
    s = rng.uniform(0, 1, 60)
    m = (rng.uniform(0, 1, 60) < 0.5).astype(float)
    a = 0.97 - 0.5 * s**10 + rng.normal(0, 0.03, 60)  # no mechanism effect
    plain, with_m = fit_cliff(s, a), fit_cliff_indicator(s, a, m)
    assert with_m.r2 >= plain.r2 - 1e-12
    assert with_m.r2 - plain.r2 < 0.05  # an indicator without effect explains noise only
    resid = a - with_m.predict(s, m)
    assert with_m.r2 == pytest.approx(1 - (resid**2).sum() / ((a - a.mean()) ** 2).sum())
    with pytest.raises(ValueError, match="0 or 1"):
        fit_cliff_indicator(s, a, m * 2)
    with pytest.raises(ValueError, match="at least 4"):
        fit_cliff_indicator(s[:3], a[:3], m[:3])
