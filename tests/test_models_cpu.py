"""The MLP, ResNet and ViT build from specs and norms, train (the loss falls), and expose their parts."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from actlab.nn.mlp import MLP
from actlab.nn.norms import ChannelsLast, PercentileBatchNorm, PercentileLayerNorm
from actlab.nn.resnet import ResNet
from actlab.nn.vit import ViT


def _train_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int = 20) -> None:
    """Fit one fixed batch with Adam: gradients reach every parameter, are finite, and the
    loss falls (memorising a batch is the least a model that trains can do)."""
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for step in range(steps):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        if step == 0:
            grads = [p.grad for p in model.parameters() if p.requires_grad]
            assert all(g is not None and torch.isfinite(g).all() for g in grads)
        losses.append(float(loss.detach()))
        opt.step()
    with torch.no_grad():
        losses.append(float(nn.functional.cross_entropy(model(x), y)))
    assert all(map(torch.isfinite, torch.tensor(losses)))
    assert losses[-1] < losses[0], losses


def test_mlp_layout_matches_seed_and_has_no_biases():
    torch.manual_seed(0)
    model = MLP(64, 10, hidden=32, depth=5, activation="relu")
    layers = model.linear_layers()
    assert list(layers) == [f"layer{i}" for i in range(1, 8)]
    assert [tuple(m.weight.shape) for m in layers.values()] == [(32, 64)] + [(32, 32)] * 5 + [(10, 32)]
    assert all(m.bias is None for m in layers.values())
    assert not any(isinstance(m, (nn.LayerNorm, nn.BatchNorm1d)) for m in model.modules())
    x = torch.randn(8, 1, 8, 8)
    # forward equals the explicit composition Linear -> ReLU per block
    h = torch.relu(x.flatten(1) @ layers["layer1"].weight.T)
    for i in range(2, 7):
        h = torch.relu(h @ layers[f"layer{i}"].weight.T)
    torch.testing.assert_close(model(x), h @ layers["layer7"].weight.T)


def test_mlp_skip_adds_the_block_input():
    torch.manual_seed(0)
    plain = MLP(16, 3, hidden=8, depth=2, activation="tanh")
    skip = MLP(16, 3, hidden=8, depth=2, activation="tanh", skip=True)
    skip.load_state_dict(plain.state_dict())
    x = torch.randn(4, 16)
    h = plain.input(x)
    for block in plain.blocks:
        h = h + block(h)
    torch.testing.assert_close(skip(x), plain.head(h))


@pytest.mark.parametrize("norm", ["none", "rmsnorm", "layernorm", "batchnorm", "percentile:q=0.7"])
@pytest.mark.parametrize("activation", ["relu", "gelu:topk=0.2"])
def test_mlp_trains_with_every_norm(norm, activation):
    torch.manual_seed(0)
    model = MLP(20, 4, hidden=16, depth=2, activation=activation, norm=norm, skip=True)
    _train_step(model, torch.randn(16, 20), torch.randint(0, 4, (16,)))


def test_percentile_norm_in_mlp_controls_activation_sparsity():
    torch.manual_seed(0)
    model = MLP(20, 4, hidden=100, depth=1, activation="relu", norm="percentile:q=0.85",
                norm_bias=False)
    outputs = []
    model.blocks[0].act.register_forward_hook(lambda m, i, o: outputs.append(o))
    model(torch.randn(32, 20))
    assert isinstance(model.blocks[0].norm, PercentileLayerNorm)
    zero_frac = float((outputs[0] == 0).float().mean())
    assert abs(zero_frac - 0.85) < 0.011


@pytest.mark.parametrize("norm", ["batchnorm", "none", "percentile:q=0.6", "layernorm"])
def test_resnet_shapes_and_training(norm):
    torch.manual_seed(0)
    model = ResNet(in_channels=1, num_classes=10, widths=(4, 8), blocks=1, activation="relu", norm=norm)
    x = torch.randn(6, 1, 8, 8)
    assert model(x).shape == (6, 10)
    _train_step(model, x, torch.randint(0, 10, (6,)))
    if norm.startswith("percentile"):
        assert any(isinstance(m, PercentileBatchNorm) for m in model.modules())
    if norm == "batchnorm":
        assert sum(isinstance(m, nn.BatchNorm2d) for m in model.modules()) == 6


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm", "percentile-layernorm:q=0.6"])
def test_resnet_float32_gradients_match_float64_with_channel_norms(norm):
    """Last-dim norms applied over channels hand contiguous maps on, so the stride-2 1x1
    shortcut from 4 channels gets the right weight gradient: oneDNN's channels-last AVX2
    kernel for it gets it wrong (and corrupts the heap on one thread). float64 convolutions
    do not go through oneDNN, so they are the reference."""
    torch.manual_seed(0)
    model = ResNet(in_channels=1, num_classes=10, widths=(4, 8), blocks=1, activation="relu",
                   norm=norm)
    reference = ResNet(in_channels=1, num_classes=10, widths=(4, 8), blocks=1,
                       activation="relu", norm=norm).double()
    reference.load_state_dict(model.state_dict())
    x, y = torch.randn(6, 1, 8, 8), torch.randint(0, 10, (6,))
    maps = []
    hooks = [m.register_forward_hook(lambda m, i, o: maps.append(o))
             for m in model.modules() if isinstance(m, ChannelsLast)]
    nn.functional.cross_entropy(model(x), y).backward()
    for h in hooks:
        h.remove()
    assert maps and all(t.is_contiguous() for t in maps)
    nn.functional.cross_entropy(reference(x.double()), y).backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad.float(), rtol=1e-4, atol=1e-6,
                                   msg=lambda m, name=name: f"{name}: {m}")


def test_vit_blocks_expose_residual_stream_and_train():
    torch.manual_seed(0)
    model = ViT(image_size=8, patch_size=2, in_channels=1, dim=16, depth=3, heads=2,
                activation="gelu", mlp_norm="percentile:q=0.5")
    assert isinstance(model.blocks, nn.ModuleList) and len(model.blocks) == 3
    x = torch.randn(5, 1, 8, 8)
    streams = []
    hooks = [b.register_forward_hook(lambda m, i, o: streams.append(o)) for b in model.blocks]
    logits = model(x)
    for h in hooks:
        h.remove()
    assert logits.shape == (5, 10)
    assert [tuple(s.shape) for s in streams] == [(5, 17, 16)] * 3
    # the stream after block i is block i applied to the stream before it
    torch.testing.assert_close(model.blocks[1](streams[0]), streams[1])
    torch.testing.assert_close(model.blocks[0](model.embed(x)), streams[0])
    _train_step(model, x, torch.randint(0, 10, (5,)))


def test_vit_rejects_wrong_image_size():
    model = ViT(image_size=8, patch_size=2, dim=8, depth=1, heads=2)
    with pytest.raises(ValueError, match="expected"):
        model(torch.randn(2, 1, 16, 16))
