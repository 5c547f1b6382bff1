"""Structured (per-channel) Top-K, ``topk=K:channel``: whole channels of (N, C, H, W)
activations ranked by their spatial mean ("Bug or Feature²" §4 names per-channel sparsity;
the score is ours), against a dense reference built here from ``torch.topk`` over the channel
means computed directly, with gradients against autograd of that reference and finite
differences."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import actlab
from actlab.activations import parse_spec

# (K, C) -> channels kept: ceil(K * C), at least 1, worked out by hand
KEPT = {(0.3, 10): 3, (0.05, 64): 4, (0.01, 8): 1, (0.25, 8): 2, (1.0, 8): 8, (0.5, 7): 4}


def dense_reference(x: torch.Tensor, k: int) -> torch.Tensor:
    """GELU, then per example the k channels of largest mean over H x W kept, by a loop."""
    y = F.gelu(x)
    out = torch.zeros_like(y)
    for n in range(y.shape[0]):
        means = torch.stack([y[n, c].mean() for c in range(y.shape[1])])
        for c in torch.topk(means, k).indices.tolist():
            out[n, c] = y[n, c]
    return out


@pytest.mark.parametrize(("fraction", "channels"), sorted(KEPT))
def test_matches_dense_reference(fraction, channels):
    gen = torch.Generator().manual_seed(channels)
    x = torch.randn(5, channels, 4, 3, generator=gen, dtype=torch.float64)
    m = actlab.activation(f"gelu:topk={fraction:g}:channel")
    y = m(x)
    torch.testing.assert_close(y, dense_reference(x, KEPT[(fraction, channels)]))
    alive = (y != 0).flatten(2).any(-1)  # a channel is kept whole or zeroed whole
    assert (alive.sum(1) == KEPT[(fraction, channels)]).all()
    kept = alive[:, :, None, None].expand_as(y)
    torch.testing.assert_close(y[kept], F.gelu(x)[kept])


def test_differs_from_per_activation_topk():
    """The per-activation form keeps the top entries at each position, so a channel is
    partly kept; the structured form never is."""
    x = torch.randn(4, 8, 5, 5, generator=torch.Generator().manual_seed(0))
    per_entry = actlab.activation("gelu:topk=0.25")(x)
    partly = ((per_entry != 0).flatten(2).float().mean(-1))
    assert ((partly > 0) & (partly < 1)).any()
    structured = actlab.activation("gelu:topk=0.25:channel")(x)
    whole = (structured != 0).flatten(2).float().mean(-1)
    assert set(whole.unique().tolist()) <= {0.0, 1.0}


def test_gradient_matches_reference_and_finite_differences():
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(3, 10, 3, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    m = actlab.activation("gelu:topk=0.3:channel")
    weights = torch.randn(3, 10, 3, 3, generator=gen, dtype=torch.float64)
    (grad,) = torch.autograd.grad((m(x) * weights).sum(), x)
    x_ref = x.detach().clone().requires_grad_(True)
    (ref,) = torch.autograd.grad((dense_reference(x_ref, 3) * weights).sum(), x_ref)
    torch.testing.assert_close(grad, ref)
    dropped = (m(x.detach()) == 0).flatten(2).all(-1)
    assert (grad[dropped] == 0).all() and (grad[~dropped] != 0).any()
    # the ranking is piecewise constant: small perturbations leave it, so the map is smooth
    assert torch.autograd.gradcheck(m, (x,), eps=1e-6, atol=1e-7)


def test_vmap_matches_loop():
    """Under torch.func (the ensembles' path) each member selects its own channels."""
    m = actlab.activation("gelu:topk=0.25:channel")
    xs = torch.randn(3, 2, 8, 4, 4, generator=torch.Generator().manual_seed(1))
    stacked = torch.func.vmap(m)(xs)
    torch.testing.assert_close(stacked, torch.stack([m(x) for x in xs]))


@pytest.mark.parametrize("shape", [(4, 8), (2, 8, 6), (1, 2, 8, 3, 3)])
def test_other_shapes_are_refused_by_name(shape):
    m = actlab.activation("gelu:topk=0.25:channel")
    with pytest.raises(ValueError, match=r"'gelu:topk=0.25:channel'.*4-D \(N, C, H, W\)"):
        m(torch.randn(*shape))


@pytest.mark.parametrize(("spec", "message"), [
    ("gelu:channel", "needs 'topk=K'"),
    ("gelu:topk=0.1:channel:freeze_after=5", "drop 'freeze_after' or 'channel'"),
    ("gelu:topk=0.1:channel:momentum=0.1", "drop 'momentum' or 'channel'"),
    ("gelu:topk=0.1:channel:gaussian", "drop 'gaussian' or 'channel'"),
    ("gelu:topk=0.1:chanel", "did you mean 'channel'"),
])
def test_spec_errors(spec, message):
    with pytest.raises(actlab.errors.SpecError, match=message):
        actlab.activation(spec)


def test_canonical_spec_and_base():
    parsed = parse_spec("gelu:channel:topk=0.1")
    assert parsed.canonical == "gelu:topk=0.1:channel"
    assert actlab.activation("gelu:channel:topk=0.1").topk_rule == "channel"
    from actlab.activations.grammar import base_spec

    assert base_spec("gelu:topk=0.1:channel") == "gelu"


def test_resnet_trains_with_structured_topk():
    """In the ResNet every site keeps whole channels; a backward reaches the stem."""
    from actlab.nn.resnet import ResNet

    torch.manual_seed(0)
    model = ResNet(1, 10, widths=(8, 16), blocks=1, activation="gelu:topk=0.25:channel")
    outs = []
    hooks = [mod.register_forward_hook(lambda _m, _i, o: outs.append(o))
             for mod in model.modules() if getattr(mod, "topk_rule", None) == "channel"]
    loss = model(torch.randn(4, 1, 8, 8)).logsumexp(-1).sum()
    loss.backward()
    for h in hooks:
        h.remove()
    assert outs
    for out in outs:
        alive = (out != 0).flatten(2).any(-1).sum(1)
        assert (alive == -(-out.shape[1] // 4)).all()  # ceil(C / 4) channels, C = 8 or 16
    stem = next(p for p in model.parameters() if p.dim() == 4)
    assert stem.grad is not None and stem.grad.abs().sum() > 0
