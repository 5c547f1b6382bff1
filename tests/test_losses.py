"""Loss names against explicit formulas (values and gradients)."""

from __future__ import annotations

import pytest
import torch

from actlab.errors import ConfigError
from actlab.train import losses


def _pair(shape=(6, 3)):
    g = torch.Generator().manual_seed(0)
    out = torch.randn(*shape, generator=g, dtype=torch.float64, requires_grad=True)
    target = torch.randn(*shape, generator=g, dtype=torch.float64)
    return out, target


def _check(fn, formula, out, target):
    value = fn(out, target)
    (grad,) = torch.autograd.grad(value, out)
    ref_out = out.detach().clone().requires_grad_(True)
    ref = formula(ref_out, target)
    (ref_grad,) = torch.autograd.grad(ref, ref_out)
    torch.testing.assert_close(value, ref)
    torch.testing.assert_close(grad, ref_grad)


def test_mse_mean_is_mean_over_all_elements():
    out, target = _pair()
    n = out.numel()
    _check(losses.mse_mean, lambda o, t: sum(((o - t) ** 2).flatten()) / n, out, target)


def test_half_sse_is_half_sum_per_example_mean_over_batch():
    out, target = _pair()
    rows = out.shape[0]
    _check(losses.half_sse,
           lambda o, t: sum(0.5 * sum((o[i] - t[i]) ** 2) for i in range(rows)) / rows,
           out, target)
    # the two squared-error names differ by exactly 2 / (output width)
    torch.testing.assert_close(losses.mse_mean(out, target),
                               losses.half_sse(out, target) * 2 / out.shape[1])


def test_cross_entropy_names_match_log_softmax_formula():
    out, _ = _pair((5, 4))
    labels = torch.tensor([0, 3, 1, 2, 3])

    def formula(o, y):
        return -torch.stack([o[i, y[i]] - torch.logsumexp(o[i], 0) for i in range(len(y))]).mean()

    _check(losses.cross_entropy, formula, out, labels)
    probs = torch.softmax(torch.randn(5, 4, dtype=torch.float64), -1)
    _check(losses.soft_cross_entropy,
           lambda o, p: -(p * (o - torch.logsumexp(o, 1, keepdim=True))).sum(1).mean(), out, probs)


def test_bce_logits_matches_sigmoid_formula():
    out, _ = _pair((7, 1))
    labels = torch.tensor([0.0, 1, 1, 0, 1, 0, 0], dtype=torch.float64)

    def formula(o, y):
        p = torch.sigmoid(o.reshape(-1))
        return -(y * torch.log(p) + (1 - y) * torch.log(1 - p)).mean()

    _check(losses.bce_logits, formula, out, labels)


def test_aliases_and_unknown_names():
    assert losses.get_loss("mse") is losses.mse_mean  # a bare "mse" means the mean
    assert losses.get_loss("soft_ce") is losses.soft_cross_entropy
    with pytest.raises(ConfigError, match="loss: .*half_sse"):
        losses.get_loss("half_ss")
