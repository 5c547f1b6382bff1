"""The two-spirals generator: shape, balance, determinism, scale and geometry."""

from __future__ import annotations

import math

import pytest
import torch

from actlab.data.spirals import spiral_input_rms, two_spirals
from actlab.errors import ConfigError


def test_shapes_labels_and_balance():
    x, y = two_spirals(301, seed=3)
    assert x.shape == (301, 2) and y.shape == (301,)
    assert x.dtype == torch.float64
    assert set(y.tolist()) == {0.0, 1.0}
    assert int(y.sum()) == 151  # odd n: class 1 gets the extra point


def test_deterministic_per_seed_and_different_across_seeds():
    a, _ = two_spirals(200, seed=7)
    b, _ = two_spirals(200, seed=7)
    c, _ = two_spirals(200, seed=8)
    assert torch.equal(a, b)
    assert not torch.allclose(a, c)


def test_unit_scale_gives_unit_second_moment_per_coordinate():
    x, _ = two_spirals(40_000, noise=0.1, seed=0)
    second = x.pow(2).mean(dim=0)
    # 40k points: the sampling error of a second moment is about 1%.
    assert torch.allclose(second, torch.ones(2, dtype=torch.float64), atol=0.04)
    assert spiral_input_rms(0.0) == pytest.approx(math.sqrt(1 / 6))


def test_noise_free_points_lie_on_their_arm():
    x, y = two_spirals(500, noise=0.0, turns=1.5, scale="radius", seed=1)
    radius = x.norm(dim=1)
    assert radius.max() <= 1.0 + 1e-12
    # On arm k the angle is 2 pi turns r + k pi (mod 2 pi).
    angle = torch.atan2(x[:, 1], x[:, 0])
    expected = 2 * math.pi * 1.5 * radius + math.pi * y
    wrapped = torch.remainder(angle - expected + math.pi, 2 * math.pi) - math.pi
    assert wrapped.abs().max() < 1e-9
    # The two arms are point reflections of each other: class 1 never sits on arm 0.
    other = torch.remainder(angle - (expected + math.pi) + math.pi, 2 * math.pi) - math.pi
    assert other.abs().min() > 1e-3


@pytest.mark.parametrize("kwargs, field", [({"noise": -0.1}, "noise"), ({"turns": 0.0}, "turns"),
                                           ({"scale": "std"}, "scale")])
def test_bad_arguments_raise_config_error_naming_the_field(kwargs, field):
    with pytest.raises(ConfigError) as info:
        two_spirals(10, **kwargs)
    assert info.value.field == field
