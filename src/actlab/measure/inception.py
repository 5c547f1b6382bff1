"""Inception-v3 of the FID variant, for users who supply its weights file.

FID as published ("GANs Trained by a Two Time-Scale Update Rule Converge to a Local Nash
Equilibrium", Heusel et al., 2017, section 3) uses the 2015 TensorFlow Inception-v3 graph
(``inception-2015-12-05``). pytorch-fid ported it to PyTorch as torchvision's Inception3
with 1008 classes, no auxiliary head, and patched blocks: the average pools exclude the
zero padding (TensorFlow's behaviour), and the last block max-pools its pool branch. This
module writes that network out, with the same attribute names, so the state dict of
``pt_inception-2015-12-05-6726825d.pth`` loads strictly.

Inputs are ``(N, 3, H, W)`` images in ``[-1, 1]``, resized bilinearly to 299x299; features
are the 2048 pool3 values, logits the 1008 outputs of ``fc`` (with its bias). actlab never
downloads the weights and ships none.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from actlab.measure.feature_network import FeatureNetwork

NAME = "inception-v3-fid"
WEIGHTS_FILE = "pt_inception-2015-12-05-6726825d.pth"
WEIGHTS_URL = ("https://github.com/mseitzer/pytorch-fid/releases/download/fid_weights/"
               + WEIGHTS_FILE)
INPUT_SIZE = 299


class BasicConv2d(nn.Module):
    """Convolution without bias, batch norm (eps 0.001, as TensorFlow), ReLU."""

    def __init__(self, in_channels: int, out_channels: int, **kwargs) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, bias=False, **kwargs)
        self.bn = nn.BatchNorm2d(out_channels, eps=0.001)

    def forward(self, x: Tensor) -> Tensor:
        """Conv, norm, ReLU."""
        return F.relu(self.bn(self.conv(x)))


def _avg_pool_same(x: Tensor) -> Tensor:
    # TensorFlow's average pool leaves the padded zeros out of the mean.
    return F.avg_pool2d(x, kernel_size=3, stride=1, padding=1, count_include_pad=False)


class FIDInceptionA(nn.Module):
    """35x35 block: 1x1, 5x5, double 3x3 and pooled branches."""

    def __init__(self, in_channels: int, pool_features: int) -> None:
        super().__init__()
        self.branch1x1 = BasicConv2d(in_channels, 64, kernel_size=1)
        self.branch5x5_1 = BasicConv2d(in_channels, 48, kernel_size=1)
        self.branch5x5_2 = BasicConv2d(48, 64, kernel_size=5, padding=2)
        self.branch3x3dbl_1 = BasicConv2d(in_channels, 64, kernel_size=1)
        self.branch3x3dbl_2 = BasicConv2d(64, 96, kernel_size=3, padding=1)
        self.branch3x3dbl_3 = BasicConv2d(96, 96, kernel_size=3, padding=1)
        self.branch_pool = BasicConv2d(in_channels, pool_features, kernel_size=1)

    def forward(self, x: Tensor) -> Tensor:
        """Concatenated branch outputs."""
        b5 = self.branch5x5_2(self.branch5x5_1(x))
        b3 = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
        return torch.cat([self.branch1x1(x), b5, b3, self.branch_pool(_avg_pool_same(x))], 1)


class InceptionB(nn.Module):
    """Grid reduction 35x35 -> 17x17."""

    def __init__(self, in_channels: int) -> None:
        super().__init__()
        self.branch3x3 = BasicConv2d(in_channels, 384, kernel_size=3, stride=2)
        self.branch3x3dbl_1 = BasicConv2d(in_channels, 64, kernel_size=1)
        self.branch3x3dbl_2 = BasicConv2d(64, 96, kernel_size=3, padding=1)
        self.branch3x3dbl_3 = BasicConv2d(96, 96, kernel_size=3, stride=2)

    def forward(self, x: Tensor) -> Tensor:
        """Concatenated branch outputs."""
        b3 = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
        return torch.cat([self.branch3x3(x), b3, F.max_pool2d(x, kernel_size=3, stride=2)], 1)


class FIDInceptionC(nn.Module):
    """17x17 block with factorised 7x7 convolutions."""

    def __init__(self, in_channels: int, channels_7x7: int) -> None:
        super().__init__()
        c7 = channels_7x7
        self.branch1x1 = BasicConv2d(in_channels, 192, kernel_size=1)
        self.branch7x7_1 = BasicConv2d(in_channels, c7, kernel_size=1)
        self.branch7x7_2 = BasicConv2d(c7, c7, kernel_size=(1, 7), padding=(0, 3))
        self.branch7x7_3 = BasicConv2d(c7, 192, kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7dbl_1 = BasicConv2d(in_channels, c7, kernel_size=1)
        self.branch7x7dbl_2 = BasicConv2d(c7, c7, kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7dbl_3 = BasicConv2d(c7, c7, kernel_size=(1, 7), padding=(0, 3))
        self.branch7x7dbl_4 = BasicConv2d(c7, c7, kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7dbl_5 = BasicConv2d(c7, 192, kernel_size=(1, 7), padding=(0, 3))
        self.branch_pool = BasicConv2d(in_channels, 192, kernel_size=1)

    def forward(self, x: Tensor) -> Tensor:
        """Concatenated branch outputs."""
        b7 = self.branch7x7_3(self.branch7x7_2(self.branch7x7_1(x)))
        d = x
        for conv in (self.branch7x7dbl_1, self.branch7x7dbl_2, self.branch7x7dbl_3,
                     self.branch7x7dbl_4, self.branch7x7dbl_5):
            d = conv(d)
        return torch.cat([self.branch1x1(x), b7, d, self.branch_pool(_avg_pool_same(x))], 1)


class InceptionD(nn.Module):
    """Grid reduction 17x17 -> 8x8."""

    def __init__(self, in_channels: int) -> None:
        super().__init__()
        self.branch3x3_1 = BasicConv2d(in_channels, 192, kernel_size=1)
        self.branch3x3_2 = BasicConv2d(192, 320, kernel_size=3, stride=2)
        self.branch7x7x3_1 = BasicConv2d(in_channels, 192, kernel_size=1)
        self.branch7x7x3_2 = BasicConv2d(192, 192, kernel_size=(1, 7), padding=(0, 3))
        self.branch7x7x3_3 = BasicConv2d(192, 192, kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7x3_4 = BasicConv2d(192, 192, kernel_size=3, stride=2)

    def forward(self, x: Tensor) -> Tensor:
        """Concatenated branch outputs."""
        b3 = self.branch3x3_2(self.branch3x3_1(x))
        b7 = x
        for conv in (self.branch7x7x3_1, self.branch7x7x3_2, self.branch7x7x3_3,
                     self.branch7x7x3_4):
            b7 = conv(b7)
        return torch.cat([b3, b7, F.max_pool2d(x, kernel_size=3, stride=2)], 1)


class FIDInceptionE(nn.Module):
    """8x8 block with split 3x3 convolutions; ``pool`` is ``"avg"`` (Mixed_7b) or ``"max"``.

    The TensorFlow graph max-pools the pool branch of its last block (Mixed_7c), unlike the
    average pool described for Inception-v3; the FID weights were fitted that way.
    """

    def __init__(self, in_channels: int, pool: str = "avg") -> None:
        super().__init__()
        if pool not in ("avg", "max"):
            raise ValueError(f"pool must be 'avg' or 'max', got {pool!r}")
        self.pool = pool
        self.branch1x1 = BasicConv2d(in_channels, 320, kernel_size=1)
        self.branch3x3_1 = BasicConv2d(in_channels, 384, kernel_size=1)
        self.branch3x3_2a = BasicConv2d(384, 384, kernel_size=(1, 3), padding=(0, 1))
        self.branch3x3_2b = BasicConv2d(384, 384, kernel_size=(3, 1), padding=(1, 0))
        self.branch3x3dbl_1 = BasicConv2d(in_channels, 448, kernel_size=1)
        self.branch3x3dbl_2 = BasicConv2d(448, 384, kernel_size=3, padding=1)
        self.branch3x3dbl_3a = BasicConv2d(384, 384, kernel_size=(1, 3), padding=(0, 1))
        self.branch3x3dbl_3b = BasicConv2d(384, 384, kernel_size=(3, 1), padding=(1, 0))
        self.branch_pool = BasicConv2d(in_channels, 192, kernel_size=1)

    def forward(self, x: Tensor) -> Tensor:
        """Concatenated branch outputs."""
        b3 = self.branch3x3_1(x)
        b3 = torch.cat([self.branch3x3_2a(b3), self.branch3x3_2b(b3)], 1)
        d = self.branch3x3dbl_2(self.branch3x3dbl_1(x))
        d = torch.cat([self.branch3x3dbl_3a(d), self.branch3x3dbl_3b(d)], 1)
        if self.pool == "avg":
            pooled = _avg_pool_same(x)
        else:
            pooled = F.max_pool2d(x, kernel_size=3, stride=1, padding=1)
        return torch.cat([self.branch1x1(x), b3, d, self.branch_pool(pooled)], 1)


class FIDInceptionV3(nn.Module):
    """The FID Inception-v3: ``forward`` gives pool3 features (N, 2048) and logits (N, 1008)."""

    def __init__(self) -> None:
        super().__init__()
        self.Conv2d_1a_3x3 = BasicConv2d(3, 32, kernel_size=3, stride=2)
        self.Conv2d_2a_3x3 = BasicConv2d(32, 32, kernel_size=3)
        self.Conv2d_2b_3x3 = BasicConv2d(32, 64, kernel_size=3, padding=1)
        self.Conv2d_3b_1x1 = BasicConv2d(64, 80, kernel_size=1)
        self.Conv2d_4a_3x3 = BasicConv2d(80, 192, kernel_size=3)
        self.Mixed_5b = FIDInceptionA(192, pool_features=32)
        self.Mixed_5c = FIDInceptionA(256, pool_features=64)
        self.Mixed_5d = FIDInceptionA(288, pool_features=64)
        self.Mixed_6a = InceptionB(288)
        self.Mixed_6b = FIDInceptionC(768, channels_7x7=128)
        self.Mixed_6c = FIDInceptionC(768, channels_7x7=160)
        self.Mixed_6d = FIDInceptionC(768, channels_7x7=160)
        self.Mixed_6e = FIDInceptionC(768, channels_7x7=192)
        self.Mixed_7a = InceptionD(768)
        self.Mixed_7b = FIDInceptionE(1280, pool="avg")
        self.Mixed_7c = FIDInceptionE(2048, pool="max")
        self.fc = nn.Linear(2048, 1008)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Resize to 299x299 (bilinear, as pytorch-fid), then features and logits."""
        x = F.interpolate(x, size=(INPUT_SIZE, INPUT_SIZE), mode="bilinear", align_corners=False)
        x = self.Conv2d_2b_3x3(self.Conv2d_2a_3x3(self.Conv2d_1a_3x3(x)))
        x = F.max_pool2d(x, kernel_size=3, stride=2)
        x = self.Conv2d_4a_3x3(self.Conv2d_3b_1x1(x))
        x = F.max_pool2d(x, kernel_size=3, stride=2)
        for block in (self.Mixed_5b, self.Mixed_5c, self.Mixed_5d, self.Mixed_6a, self.Mixed_6b,
                      self.Mixed_6c, self.Mixed_6d, self.Mixed_6e, self.Mixed_7a, self.Mixed_7b,
                      self.Mixed_7c):
            x = block(x)
        features = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return features, self.fc(features)


def _check_state_dict(state: object, model: nn.Module, path: Path) -> dict[str, Tensor]:
    if not isinstance(state, dict) or not all(isinstance(v, Tensor) for v in state.values()):
        raise ValueError(f"{path} does not hold a state dict of tensors; expected the "
                         f"pytorch-fid file {WEIGHTS_FILE}")
    expected = model.state_dict()
    # Old checkpoints may lack the batch-norm step counters, which do not affect eval.
    missing = [k for k in expected if k not in state and not k.endswith("num_batches_tracked")]
    unexpected = [k for k in state if k not in expected]
    wrong = [f"{k} {tuple(state[k].shape)} (expected {tuple(v.shape)})"
             for k, v in expected.items() if k in state and state[k].shape != v.shape]
    if missing or unexpected or wrong:
        parts = [f"{label}: {len(keys)} (e.g. {', '.join(keys[:3])})" for label, keys in
                 (("missing keys", missing), ("unexpected keys", unexpected),
                  ("wrong shapes", wrong)) if keys]
        raise ValueError(f"{path} is not the FID Inception-v3 state dict ({WEIGHTS_FILE}): "
                         + "; ".join(parts))
    return state


def inception_v3_fid(weights_path: str | os.PathLike, *, batch_size: int = 32,
                     device: str | torch.device | None = None) -> FeatureNetwork:
    """The FID Inception-v3 loaded from ``weights_path`` as a :class:`FeatureNetwork`.

    Raises ``FileNotFoundError`` (saying where to get the file) when it does not exist and
    ``ValueError`` when it is not the expected state dict.
    """
    path = Path(weights_path)
    if not path.is_file():
        raise FileNotFoundError(
            f"Inception-v3 FID weights not found at {path}. actlab never downloads them: "
            f"get {WEIGHTS_FILE} from {WEIGHTS_URL} (the weights pytorch-fid uses) and pass "
            "its path.")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise ValueError(f"cannot read {path} as a PyTorch state dict ({exc}); expected "
                         f"the pytorch-fid file {WEIGHTS_FILE}") from exc
    model = FIDInceptionV3()
    model.load_state_dict(_check_state_dict(state, model, path), strict=True)
    if device is not None:
        model = model.to(device)
    return FeatureNetwork(model.eval(), name=NAME, channels=3, batch_size=batch_size)
