"""The papers' model sizes, counted on the meta device against closed forms and published
counts: the classifiers' ``size="paper"`` ("Bug or Feature²" App. D.2, D.3, D.5) and ViT-B/16
("Rethinking Activation Functions" §4.1); the CPU sizes stay the defaults."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from actlab.nn.classifiers import build_classifier
from actlab.nn.vit import ViT, vit_base


def _count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _data(channels: int, size: int, classes: int) -> SimpleNamespace:
    return SimpleNamespace(image_shape=(channels, size, size),
                           in_features=channels * size * size, num_classes=classes)


CIFAR = _data(3, 32, 10)


def _resnet18_count(classes: int) -> int:
    """ResNet-18 of BasicBlocks (64-128-256-512, two a stage), 3x3 stem, bias-free
    convolutions and head, BatchNorm (2 parameters a channel), written out."""
    total = 3 * 64 * 9 + 2 * 64  # stem
    width = 64
    for out in (64, 128, 256, 512):
        for _block in range(2):
            total += width * out * 9 + 2 * out + out * out * 9 + 2 * out
            if width != out:  # projection shortcut: 1x1 convolution and its norm
                total += width * out + 2 * out
            width = out
    return total + 512 * classes


def test_the_classifiers_paper_sizes():
    with torch.device("meta"):
        mlp = build_classifier("mlp", CIFAR, "relu", size="paper")
        skip = build_classifier("mlp-skip", CIFAR, "relu", size="paper")
        resnet = build_classifier("resnet", CIFAR, "relu", size="paper")
        maxvit = build_classifier("maxvit", _data(3, 224, 1000), "gelu", size="paper")
    # App. D.2: 3072 -> 1024, five blocks Linear(1024, 1024), 1024 -> 10, no biases
    assert _count(mlp) == _count(skip) == 3072 * 1024 + 5 * 1024 ** 2 + 1024 * 10
    assert _count(resnet) == _resnet18_count(10)
    assert _count(maxvit) == 30_919_624  # torchvision's maxvit_t num_params


def test_the_cpu_sizes_stay_the_defaults_and_the_plain_vit_has_no_paper_size():
    for kind in ("mlp", "mlp-skip", "resnet", "vit", "maxvit"):
        a = build_classifier(kind, CIFAR, "relu" if kind != "maxvit" else "gelu", seed=3)
        b = build_classifier(kind, CIFAR, "relu" if kind != "maxvit" else "gelu", seed=3,
                             size="cpu")
        assert _count(a) == _count(b) < 1_000_000
        assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    with pytest.raises(ValueError, match="MaxViT-T"):
        build_classifier("vit", CIFAR, "gelu", size="paper")
    with pytest.raises(Exception, match="size"):
        build_classifier("mlp", CIFAR, "relu", size="huge")


def test_forward_flops_of_vit_b16_and_maxvit_t_are_torchvisions():
    # torchvision's weights state "_ops" (GFLOPS, a multiply-add as one) for both models at
    # 224 x 224: 17.564 (vit_b_16) and 5.558 (maxvit_t); ours counts a multiply-add as two
    from actlab.nn.flops import forward_cost
    from actlab.nn.maxvit import MaxViT, maxvit_config

    with torch.device("meta"):
        vit, maxvit = vit_base(), MaxViT(maxvit_config("maxvit-t"))
    x = torch.empty(1, 3, 224, 224, device="meta")
    assert forward_cost(vit, x)[0] / 2e9 == pytest.approx(17.564, abs=5e-4)
    assert forward_cost(maxvit, x)[0] / 2e9 == pytest.approx(5.558, abs=5e-4)


def test_vit_base_is_vit_b16_and_drop_path_spreads_linearly():
    with torch.device("meta"):
        model = vit_base()
    assert _count(model) == 86_567_656  # torchvision's vit_b_16 num_params
    small = ViT(image_size=8, patch_size=4, dim=8, depth=3, heads=2, drop_path=0.2)
    assert [b.drop_path.p if b.drop_path else 0.0 for b in small.blocks] == \
        pytest.approx([0.0, 0.1, 0.2])
    plain = ViT(image_size=8, patch_size=4, dim=8, depth=3, heads=2)
    plain.load_state_dict(small.state_dict())  # the same parameters: no new ones
    x = torch.randn(5, 1, 8, 8)
    small.eval()
    plain.eval()
    torch.testing.assert_close(small(x), plain(x), rtol=0, atol=0)  # identity in eval mode
    small.train()
    torch.manual_seed(0)
    with torch.no_grad():  # in training some samples' branches are dropped: outputs differ
        assert not torch.allclose(small(x), plain.train()(x))
    with pytest.raises(ValueError, match="drop_path"):
        ViT(drop_path=1.0)
