"""MaxViT (actlab.nn.maxvit): torchvision's maxvit_t parameter count on the meta device, the
window and grid partitions and the relative-position index against their closed forms, the
activation spec reaching exactly the reference's GELUs, and the two experiments taking it."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from actlab.data.images import load_image_data
from actlab.errors import ConfigError
from actlab.nn.classifiers import build_classifier
from actlab.nn.maxvit import (
    MaxViT,
    MaxViTConfig,
    grid_partition,
    maxvit_config,
    param_count,
    relative_position_index,
    small_maxvit_config,
    window_departition,
    window_partition,
)
from actlab.surgery import find_activations

pytestmark = pytest.mark.usefixtures("one_thread")

# torchvision/models/maxvit.py, MaxVit_T_Weights.IMAGENET1K_V1.meta["num_params"]
TORCHVISION_MAXVIT_T_PARAMS = 30_919_624


def test_maxvit_t_has_torchvision_parameter_count_on_meta() -> None:
    with torch.device("meta"):
        model = MaxViT(maxvit_config("maxvit-t"))
    assert all(p.is_meta for p in model.parameters())
    assert sum(p.numel() for p in model.parameters()) == TORCHVISION_MAXVIT_T_PARAMS
    # only the head depends on the classes: 512 weights per class, no bias
    assert param_count(maxvit_config("MaxViT-T", num_classes=10)) == (
        TORCHVISION_MAXVIT_T_PARAMS - 990 * 512)
    # 2-2-5-2 layers (App. D.5) on maps of 56, 28, 14 and 7, each split by the partition 7
    assert len(model.blocks) == 11
    assert maxvit_config("maxvit-t").grid_sizes() == [56, 28, 14, 7]


def _coordinates(h: int, w: int) -> torch.Tensor:
    """(1, 2, H, W): channel 0 the row, channel 1 the column of every pixel."""
    rows, cols = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    return torch.stack([rows, cols]).unsqueeze(0).float()


def test_window_partition_groups_contiguous_blocks_and_inverts() -> None:
    x = _coordinates(6, 6)
    windows = window_partition(x, 3)  # (1, 4, 9, 2)
    assert windows.shape == (1, 4, 9, 2)
    for g in range(4):
        r0, c0 = 3 * (g // 2), 3 * (g % 2)
        expected = [(r0 + i, c0 + j) for i in range(3) for j in range(3)]
        assert [tuple(map(int, t)) for t in windows[0, g]] == expected
    assert torch.equal(window_departition(windows, 3, 2, 2), x)


def test_grid_partition_groups_dilated_tokens() -> None:
    x = _coordinates(6, 6)
    grid = grid_partition(x, 2)  # groups of 2x2 tokens spaced 6/2 = 3 apart
    assert grid.shape == (1, 9, 4, 2)
    for g in range(9):
        r0, c0 = g // 3, g % 3
        expected = [(r0 + 3 * i, c0 + 3 * j) for i in range(2) for j in range(2)]
        assert [tuple(map(int, t)) for t in grid[0, g]] == expected
    back = window_departition(grid.transpose(1, 2), 3, 2, 2)
    assert torch.equal(back, x)


def test_relative_position_index_numbers_offsets() -> None:
    size = 3
    index = relative_position_index(size)
    coords = [(i, j) for i in range(size) for j in range(size)]
    offsets = {}
    for a, (ra, ca) in enumerate(coords):
        for b, (rb, cb) in enumerate(coords):
            offsets.setdefault((ra - rb, ca - cb), set()).add(int(index[a, b]))
    # one table row per offset, and distinct offsets get distinct rows
    assert all(len(rows) == 1 for rows in offsets.values())
    rows = [next(iter(r)) for r in offsets.values()]
    assert sorted(rows) == list(range((2 * size - 1) ** 2))


def test_spec_replaces_exactly_the_reference_gelus_and_trains() -> None:
    config = small_maxvit_config(32, 3, 10, activation="relu2")
    torch.manual_seed(0)
    model = MaxViT(config)
    layers = len(model.blocks)
    sites = find_activations(model)
    # stem + per layer: MBConv's two, window MLP, grid MLP (SE's SiLU and the head's tanh stay)
    assert len(sites) == 1 + 4 * layers
    assert all(type(m).__name__ != "SiLU" for m in sites.values())
    x, y = torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,))
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    model.eval()
    with torch.no_grad():
        # eval: no batch statistics, each sample alone (to rounding)
        torch.testing.assert_close(model(x[:2]), model(x)[:2], rtol=1e-5, atol=1e-7)


def test_stochastic_depth_only_in_training() -> None:
    config = small_maxvit_config(32, 3, 10, stochastic_depth=0.5)
    torch.manual_seed(0)
    model = MaxViT(config).eval()
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        first, second = model(x), model(x)
    assert torch.equal(first, second)
    assert model.blocks[-1].mbconv.drop.p == pytest.approx(0.5)
    assert model.blocks[0].mbconv.drop.p == 0.0


def test_bad_configs_are_refused_with_the_reason() -> None:
    with pytest.raises(ConfigError, match="partition_size"):
        MaxViTConfig(image_size=64)  # stage maps 16, 8, 4, 2: 7 divides none
    with pytest.raises(ConfigError, match="maxvit-t"):
        maxvit_config("maxvit-tt")
    with pytest.raises(ConfigError, match="head_dim"):
        MaxViTConfig(head_dim=48)


@pytest.fixture(scope="module")
def digits():
    return load_image_data()


def test_build_classifier_and_experiments_accept_maxvit(digits) -> None:
    from actlab.experiments.accumulation_stop import AccumulationStopConfig
    from actlab.experiments.sparse_activations import SparseActivationsConfig, setup_model_args

    model = build_classifier("maxvit", digits, "gelu", norm="percentile:q=0.5", seed=3)
    again = build_classifier("maxvit", digits, "gelu", norm="percentile:q=0.5", seed=3)
    assert isinstance(model, MaxViT) and model.config.image_size == 8
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), again.parameters()))
    assert model(digits.x_test[:5]).shape == (5, digits.num_classes)
    AccumulationStopConfig(models=["maxvit"])
    SparseActivationsConfig(setups=["maxvit:layernorm"])
    assert setup_model_args("maxvit:rmsnorm") == {"norm": "rmsnorm"}
    with pytest.raises(ConfigError, match="maxvit"):
        AccumulationStopConfig(models=["maxvitt"])


def test_accumulation_stop_unit_trains_a_maxvit(tmp_path) -> None:
    from actlab.experiments.accumulation_stop import AccumulationStop, AccumulationStopConfig
    from actlab.runner.experiment import UnitContext

    config = AccumulationStopConfig(models=["maxvit"], steps=6, warmup=3, batch_size=16)
    result = AccumulationStop().run_unit(config, {"model": "maxvit", "norm": "percentile-frozen"},
                                         [0], UnitContext(workdir=tmp_path))
    assert result.status == "ok"
    metrics = {row[4]: row[5] for row in result.rows}
    assert 0.0 <= metrics["accuracy"] <= 1.0
    assert metrics["stat_computations"] == 3  # the frozen statistics stopped after warm-up
