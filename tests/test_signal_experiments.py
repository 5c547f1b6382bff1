"""The signal and normalization experiments at their published scale, against the handbook."""

from __future__ import annotations

import pytest

from actlab.errors import ConfigError
from actlab.experiments.normalization import NormalizationExperiment
from actlab.experiments.signal import SignalExperiment
from actlab.runner.config import build_config

from _inline_run import run_inline


def _run(exp, tmp_path, overrides=None):
    return run_inline(exp, build_config(exp.Config, overrides or {}), tmp_path)[0]


@pytest.fixture(scope="module")
def signal_summary(tmp_path_factory):
    return _run(SignalExperiment(), tmp_path_factory.mktemp("signal"))


def test_signal_claims_hold_at_published_scale(signal_summary):
    claims = SignalExperiment().claims(signal_summary)
    assert len(claims) == 16
    failed = [(c.claim, c.measured) for c in claims if not c.held]
    assert not failed, failed


def test_signal_mechanisms(signal_summary):
    p = signal_summary["profiles"]
    # sigmoid: the error vanishes towards the input, by about 4 per layer
    assert 3.5 < p["sigmoid-xavier"]["error_factor_per_layer"] < 5.0
    # ReLU + Xavier: per-example gradients flat across layers (within 2x) yet ~2^-10 of He's
    xavier = p["relu-xavier"]["per_example_grad_range"]
    he = p["relu-he"]["per_example_grad_range"]
    assert xavier[1] / xavier[0] < 2 and he[1] / he[0] < 2
    assert 300 < he[0] / xavier[0] < 3000
    assert signal_summary["histograms"]["tanh-std0.01"]["activation_std"][-1] < 1e-6


def test_signal_config_validation():
    with pytest.raises(ConfigError, match="saturation_threshold"):
        build_config(SignalExperiment.Config, {"saturation_threshold": 1.5})


def test_normalization_claims_hold(tmp_path):
    exp = NormalizationExperiment()
    summary = _run(exp, tmp_path)
    failed = [(c.claim, c.measured) for c in exp.claims(summary) if not c.held]
    assert not failed, failed
    tanh = summary["tanh-std0.01"]
    assert tanh["plain"]["first"] < 1e-15 < tanh["residual"]["first"] < tanh["batch-norm"]["first"]
    assert (tmp_path / "figures" / "normalization.png").exists()
