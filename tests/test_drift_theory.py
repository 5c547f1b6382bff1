"""The drift theorems' closed forms (actlab.theory.drift) against exact enumeration and
Gaussian closed forms, the Monte Carlo estimators against the same exact cases, wrong
variants of each formula failing at the experiment's sample sizes, and a tiny run of the
``drift-theory`` experiment."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from actlab.errors import ConfigError
from actlab.experiments.drift_theory import claims as claims_module
from actlab.experiments.drift_theory import montecarlo as mc
from actlab.runner.claims import claim_problems
from actlab.runner.config import build_config
from actlab.runner.experiment import get_experiment
from actlab.theory import drift as th

from _inline_run import run_inline

pytestmark = pytest.mark.usefixtures("one_thread")
K = 4.0


def _enumerate_plain(p, y, hidden, classes, eps=None):
    """Exact expectations over every ±1 weight pattern of a net with one gated layer after
    layer l and a head (weights ±sqrt(2 / fan_in), i.e. He's variance): E[V], E[VᵀV], the
    MSE gradient and, with ``eps``, the cross-entropy gradient at output scale ``eps``
    (label 0), each by autograd."""
    p = torch.tensor(p, dtype=torch.float64)
    n = p.numel()
    sizes = (hidden * n, classes * hidden)
    total = sum(sizes)
    acc = {"v": 0.0, "gram": 0.0, "mse": 0.0, "ce": 0.0}
    for signs in itertools.product((-1.0, 1.0), repeat=total):
        s = torch.tensor(signs, dtype=torch.float64)
        w = s[: sizes[0]].view(hidden, n) * math.sqrt(2.0 / n)
        head = s[sizes[0] :].view(classes, hidden) * math.sqrt(2.0 / hidden)
        pre = p.clone().requires_grad_(True)
        net = w @ pre.clamp_min(0)
        assert bool((net != 0).all())  # no row on the gate's threshold
        f = head @ net.clamp_min(0)
        v = head @ ((net > 0).double().unsqueeze(1) * w)
        (grad,) = torch.autograd.grad(0.5 * (f - y).pow(2).sum(), pre)
        acc["v"] = acc["v"] + v
        acc["gram"] = acc["gram"] + v.T @ v
        acc["mse"] = acc["mse"] + grad
        if eps is not None:
            pre = p.clone().requires_grad_(True)
            f = eps * (head @ (w @ pre.clamp_min(0)).clamp_min(0))
            loss = torch.nn.functional.cross_entropy(f.unsqueeze(0), torch.tensor([0]))
            (grad,) = torch.autograd.grad(loss, pre)
            acc["ce"] = acc["ce"] + grad
    count = 2.0**total
    return {k: (v / count).numpy() if torch.is_tensor(v) else v / count for k, v in acc.items()}


def test_closed_forms_are_exact_over_every_sign_pattern_of_a_tiny_network():
    # 3 units at layer l (one inactive), 2 gated units, 2 classes: 2^10 weight patterns.
    p, y = [1.0, 0.3, -0.5], torch.tensor([0.7, -1.2], dtype=torch.float64)
    exact = _enumerate_plain(p, y, hidden=2, classes=2, eps=0.05)
    g = th.gram_scale(3, [2], 2)
    assert g == pytest.approx(2 * 2 / 3)  # He telescopes to 2C / width
    np.testing.assert_allclose(exact["v"], 0.0, atol=1e-15)  # Theorem 2.1
    np.testing.assert_allclose(exact["gram"], g * np.eye(3), atol=1e-12)  # cross terms 0
    np.testing.assert_allclose(exact["mse"], th.mse_expected_gradient(p, g), atol=1e-12)
    # logits eps f: the gradient is eps (s - y)^T V, its linear part eps^2 (C-1)/C^2 g relu(p)
    ce = 0.05**2 * th.ce_factor(2) * th.mse_expected_gradient(p, g)
    np.testing.assert_allclose(exact["ce"][:2], ce[:2], rtol=5e-3)  # O(eps^2) apart
    assert exact["ce"][2] == 0.0


def test_gram_scale_of_unequal_widths_and_another_gain():
    # gain 1: each gated layer halves n_k s_k^2 = n_k / n_{k-1}; head s_L^2 = 1 / n_G
    assert th.gram_scale(24, [48, 16], 10, gain=1.0) == pytest.approx(
        10 * (1 / 16) * (48 / 24 / 2) * (16 / 48 / 2)
    )
    with pytest.raises(ValueError, match="gain"):
        th.gram_scale(4, [4], 2, gain=0.0)


def test_finite_law_enumeration_gives_the_skewed_counterexample():
    # -1 w.p. 2/3, +2 w.p. 1/3 at h = (1, 0.8): the rows with w.h > 0 are (-1, 2), (2, -1),
    # (2, 2), so E[1[w.h > 0] w1 w2] = (2/9)(-2) + (2/9)(-2) + (1/9)(4) = -4/9.
    gram = th.finite_gated_gram(
        [1.0, 0.8], th.SKEWED_VALUES, th.SKEWED_PROBS, hidden=1, head_variance=1.0, classes=1
    )
    assert gram[0, 1] == pytest.approx(-4 / 9) and gram[0, 0] == pytest.approx(14 / 9)
    # a sign-symmetric law has no cross term and half the second moment on the diagonal
    sym = th.finite_gated_gram([1.0, 0.8], (-1.0, 1.0), (0.5, 0.5), 1, 1.0, 1)
    np.testing.assert_allclose(sym, 0.5 * np.eye(2), atol=1e-15)
    with pytest.raises(ValueError, match="threshold"):
        th.finite_gated_gram([1.0, 1.0], (-1.0, 1.0), (0.5, 0.5), 1, 1.0, 1)


def test_covariance_ratio_is_exact_at_small_n_and_three_over_two_n_wide():
    assert th.relu_input_covariance_ratio(1) == pytest.approx(math.pi - 1, abs=1e-12)
    assert th.relu_input_covariance_ratio(2) == pytest.approx(1.0, abs=1e-12)
    assert 1024 * th.relu_input_covariance_ratio(1024) == pytest.approx(1.5, abs=2e-3)
    # against a direct draw of x = relu(q), q ~ N(0, I_4): Cov(||x||, x_1) / (E||x|| E x_1)
    q = (
        torch.randn(400_000, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
        .clamp_min(0)
        .numpy()
    )
    norm = np.linalg.norm(q, axis=1)
    ratio, se = mc.ratio_se(norm * q[:, 0] - norm.mean() * q[:, 0].mean(), norm * q[:, 0].mean())
    assert abs(ratio - th.relu_input_covariance_ratio(4)) < K * se
    assert abs(ratio - th.relu_input_covariance_ratio_wide(4)) > K * se  # 3/(2n) is asymptotic


def test_survival_leans_along_the_input_as_the_skip_closed_form_says():
    # E[1[w.z > 0] w] = s z / (sqrt(2 pi) ||z||) for w ~ N(0, s^2 I)
    gen = torch.Generator().manual_seed(1)
    z = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    w = 0.7 * torch.randn(400_000, 3, dtype=torch.float64, generator=gen)
    draws = ((w @ z > 0).double().unsqueeze(1) * w).numpy()
    mean, se = draws.mean(0), draws.std(0, ddof=1) / math.sqrt(len(draws))
    closed = 0.7 * z.numpy() / (math.sqrt(2 * math.pi) * float(z.norm()))
    assert np.all(np.abs(mean - closed) < K * se)


def test_monte_carlo_matches_the_exact_tiny_network():
    p, y = [1.0, 0.3, -0.5], torch.tensor([0.7, -1.2], dtype=torch.float64)
    exact = _enumerate_plain(p, y, hidden=2, classes=2)
    gen = torch.Generator().manual_seed(0)
    r = mc.plain_study(
        torch.tensor(p),
        y,
        [2],
        2,
        gain=2.0,
        samples=6000,
        chunk=2000,
        eps=0.125,
        generator=gen,
        law="rademacher",
    )
    assert np.all(np.abs(r.v_mean - exact["v"]) < K * r.v_se)
    assert np.all(np.abs(r.gram_mean - exact["gram"]) < K * r.gram_se)
    active = np.array(p) > 0
    assert np.all(np.abs(r.mse_mean - exact["mse"])[active] < K * r.mse_se[active])
    assert r.mse_mean[2] == 0.0 and r.mse_se[2] == 0.0


def test_autograd_gradient_equals_the_effective_matrix_route():
    gen = torch.Generator().manual_seed(2)
    p = torch.randn(6, dtype=torch.float64, generator=gen)
    y = torch.zeros(3, dtype=torch.float64)  # with y = 0, the gradient is exactly v_i^T f
    r = mc.plain_study(p, y, [5, 4], 3, gain=2.0, samples=64, chunk=64, eps=0.1, generator=gen)
    np.testing.assert_allclose(r.draws["mse"], r.draws["b"], rtol=1e-10, atol=1e-12)


def test_skewed_monte_carlo_matches_enumeration_and_is_negative():
    h = torch.tensor([1.0, 0.8], dtype=torch.float64)
    mean, se = mc.gram_study(
        h, 8, 3, gain=2.0, samples=6000, chunk=3000, generator=torch.Generator().manual_seed(3)
    )
    values = np.array(th.SKEWED_VALUES) * math.sqrt(2.0 / 2 / 2.0)  # variance gain / n
    exact = th.finite_gated_gram(h.numpy(), values, th.SKEWED_PROBS, 8, 2.0 / 8, 3)
    assert np.all(np.abs(mean - exact) < K * se)
    assert exact[0, 1] < 0 and mean[0, 1] + K * se[0, 1] < 0


def test_skip_monte_carlo_matches_its_closed_form_and_a_plain_one_fails():
    gen = torch.Generator().manual_seed(4)
    p = torch.randn(6, dtype=torch.float64, generator=gen)
    bypass = torch.randn(6, dtype=torch.float64, generator=gen)
    y = torch.randn(3, dtype=torch.float64, generator=gen)
    r = mc.skip_study(p, bypass, y, 3, gain=2.0, samples=20000, chunk=5000, generator=gen)
    z = bypass.numpy() + np.maximum(p.numpy(), 0.0)
    gram = th.skip_gram(z, 3)
    assert np.all(np.abs(r.gram_mean - gram) < 5.0 * r.gram_se)  # 21 entries
    cross, cross_se = mc.mean_se(r.draws["cross"])
    assert abs(cross - (gram.sum() - np.trace(gram))) < K * cross_se
    # dropping the lean along the input (the plain stack's Gram) is rejected
    assert abs(cross - 0.0) > K * cross_se
    closed = th.skip_expected_gradient(p.numpy(), bypass.numpy(), 3)
    total, total_se = mc.mean_se(r.draws["mse"])
    assert abs(total - closed.sum()) < K * total_se


@pytest.fixture(scope="module")
def plain10():
    gen = torch.Generator().manual_seed(0)
    p = torch.randn(32, dtype=torch.float64, generator=gen)
    y = torch.randn(10, dtype=torch.float64, generator=gen)
    r = mc.plain_study(
        p, y, [48, 24], 10, gain=2.0, samples=10000, chunk=2000, eps=0.125, generator=gen
    )
    return p.numpy(), r


def test_right_closed_forms_hold_and_wrong_variants_fail_at_quick_samples(plain10):
    p, r = plain10
    g = th.gram_scale(32, [48, 24], 10)
    total, se = mc.mean_se(r.draws["mse"])
    right = th.mse_expected_gradient(p, g).sum()
    assert abs(total - right) < K * se
    for wrong in (right * 9 / 10, right * 2, right / 2):  # off by (C-1)/C, a gate's 1/2
        assert abs(total - wrong) > K * se
    trace, trace_se = mc.mean_se(r.draws["trace"])
    assert abs(trace - g) < K * trace_se and abs(trace - g * 9 / 10) > K * trace_se
    ratio, ratio_se = mc.ratio_se((4 * r.draws["a1"] - r.draws["a2"]) / 3, r.draws["b"])
    assert abs(ratio - th.ce_factor(10)) < K * ratio_se
    for wrong in (9 / 10, 1 / 10, 1 / 100, 9 / 1000):  # (C-1)/C, 1/C, 1/C², (C-1)/C³
        assert abs(ratio - wrong) > K * ratio_se
    order, order_se = mc.exponent_se(r.draws["c1"], r.draws["c2"])
    assert abs(order - 4.0) < 0.5 and K * order_se < 0.5
    assert abs(order - 3.0) > 0.5  # an O(||f||^3) correction would fail
    even, even_se = mc.mean_se(r.draws["even"])
    assert abs(even) < K * even_se


def test_covariance_study_matches_the_closed_form_and_not_one_over_n():
    r = mc.covariance_study(
        16,
        16,
        1,
        3,
        loss="mse",
        first_layer="orthogonal",
        gain=2.0,
        networks=48,
        batch=512,
        generator=torch.Generator().manual_seed(5),
    )
    ratio, se = mc.ratio_se(r.cov_term[:, 1], r.mean_term[:, 1])
    assert abs(ratio - th.relu_input_covariance_ratio(16)) < K * se
    assert abs(ratio - 1 / 16) > K * se
    first, first_se = mc.mean_se(r.weight_grad[:, 0])
    assert abs(first) < K * first_se  # zero-mean inputs: no drift in layer 1
    with pytest.raises(ValueError, match="orthogonal"):
        mc.covariance_study(
            4,
            8,
            1,
            2,
            loss="mse",
            first_layer="orthogonal",
            gain=2.0,
            networks=2,
            batch=4,
            generator=torch.Generator(),
        )


def test_estimator_helpers():
    assert list(mc.chunks(10, 4)) == [4, 4, 2]
    moments = mc.Moments()
    data = torch.arange(12.0, dtype=torch.float64).view(6, 2) + 1e6
    moments.add(data[:3])
    moments.add(data[3:])
    mean, se = moments.result()
    np.testing.assert_allclose(mean, data.mean(0).numpy())
    np.testing.assert_allclose(se, (data.std(0) / math.sqrt(6)).numpy())
    with pytest.raises(ValueError, match="law"):
        mc.draw((2, 2), 2, 2.0, "cauchy", torch.Generator())
    for law in mc.LAWS:
        w = mc.draw((200_000,), 4, 2.0, law, torch.Generator().manual_seed(0))
        assert float(w.mean()) == pytest.approx(0.0, abs=0.01)
        assert float(w.var()) == pytest.approx(0.5, rel=0.02)


TINY = {
    "samples": 2000,
    "chunk": 1000,
    "theory_networks": 24,
    "theory_batch": 512,
    "theory_width": 64,
    "cov_in_dim": 256,
    "cov_width": 256,
    "cov_blocks": 2,
    "cov_networks": 6,
    "cov_batch": 256,
}


def test_tiny_run_summary_claims_and_figures(tmp_path):
    exp = get_experiment("drift-theory")
    config = build_config(exp.Config, TINY)
    summary, table, _ = run_inline(exp, config, tmp_path)
    assert set(summary["parts"]) == {
        "plain-c10",
        "plain-c2",
        "skip",
        "skewed",
        "covariance-theory",
        "covariance",
    }
    claims = exp.claims(summary)
    assert claim_problems(claims) == []
    by_id = {c.id: c for c in claims}
    papers = {i for i, c in by_id.items() if c.source_key == "bug-or-feature"}
    assert papers == {
        "drift-theory/plain-c10/ce-factors",
        "drift-theory/plain-c2/ce-factors",
        "drift-theory/plain-c10/ce-correction-order",
        "drift-theory/plain-c2/ce-correction-order",
        "drift-theory/covariance/orders-of-magnitude-below-mean",
    }
    assert all(c.held for c in claims), [c.id for c in claims if not c.held]
    assert by_id["drift-theory/plain-c10/ce-factors"].predicted == {"factor": 0.09}
    for name in ("gradients", "skip", "covariance"):
        assert (tmp_path / "figures" / f"{name}.png").exists()


def test_orders_of_magnitude_fails_on_a_narrow_mlp(tmp_path):
    # the covariance term falls like 1/width: at width 64 it is not two orders below
    exp = get_experiment("drift-theory")
    config = build_config(
        exp.Config,
        {
            **TINY,
            "parts": "covariance",
            "cov_in_dim": 64,
            "cov_width": 64,
            "cov_blocks": 5,
            "cov_networks": 8,
        },
    )
    summary, _, _ = run_inline(exp, config, tmp_path)
    verdicts = {c.id: c.held for c in exp.claims(summary)}
    assert verdicts["drift-theory/covariance/orders-of-magnitude-below-mean"] is False
    assert verdicts["drift-theory/covariance/first-layer-no-drift"] is True


def test_a_wrong_closed_form_makes_its_claim_fail(tmp_path, monkeypatch):
    exp = get_experiment("drift-theory")
    config = build_config(exp.Config, {**TINY, "parts": "plain", "classes": "10"})
    summary, _, _ = run_inline(exp, config, tmp_path)
    assert all(c.held for c in exp.claims(summary) if c.id.endswith("ce-factors"))
    monkeypatch.setattr(claims_module, "ce_factor", lambda c: (c - 1) / c**3)
    verdicts = {c.id: c.held for c in exp.claims(summary)}
    assert verdicts["drift-theory/plain-c10/ce-factors"] is False


def test_config_errors_name_the_field():
    exp = get_experiment("drift-theory")
    with pytest.raises(ConfigError, match="parts"):
        build_config(exp.Config, {"parts": "plain,bogus"})
    with pytest.raises(ConfigError, match="chunk"):
        build_config(exp.Config, {"samples": 100, "chunk": 200})
    with pytest.raises(ConfigError, match="eps"):
        build_config(exp.Config, {"eps": 2.0})
    with pytest.raises(ConfigError, match="classes"):
        build_config(exp.Config, {"classes": "1"})
