"""The unit's device: how the engine and the data modules learn where to compute."""

from __future__ import annotations

import torch
from torch import nn

from actlab.data.synthetic import GaussianStream, gaussian_inputs
from actlab.nn.deep_mlp import deep_mlp
from actlab.train.loop import Trainer
from actlab.train.placement import (
    model_device,
    on_device,
    place,
    resolve_device,
    to_model_device,
    to_unit_device,
    unit_device,
)
from actlab.train.settings import TrainSettings

META = torch.device("meta")


def test_the_unit_device_is_the_cpu_outside_a_run_and_nests():
    assert unit_device() == torch.device("cpu")
    with on_device("meta"):
        assert unit_device() == META
        with on_device("cpu"):
            assert unit_device() == torch.device("cpu")
        assert unit_device() == META
    assert unit_device() == torch.device("cpu")


def test_resolve_place_and_move():
    with on_device(META):
        assert resolve_device(None) == META and resolve_device("") == META
        assert resolve_device("cpu") == torch.device("cpu")
        model = place(nn.Linear(3, 2))
        assert model_device(model) == META
        x, y = to_unit_device(torch.ones(2, 3), torch.zeros(2))
        assert x.device == META and y.device == META
    meta_model = nn.Linear(3, 2).to(META)
    moved = to_model_device(meta_model, torch.ones(1, 3))
    assert moved.device == META
    assert model_device(nn.ReLU()) == torch.device("cpu")  # no parameters, no buffers


def test_data_streams_draw_on_the_cpu_and_land_on_the_units_device():
    reference = next(GaussianStream([0, 1], 4, 3))
    with on_device(META):
        on_meta = next(GaussianStream([0, 1], 4, 3))
        fixed = gaussian_inputs([0, 1], 5, 3)
    assert on_meta.device == META and on_meta.shape == reference.shape
    assert fixed.device == META
    # The default stream is the CPU one whatever the device: CPU numbers equal a direct draw.
    direct = GaussianStream([0, 1], 4, 3, device="cpu", generate_on_device=True)
    torch.testing.assert_close(next(direct), reference, rtol=0, atol=0)


def test_builders_initialise_on_the_cpu_then_place():
    cpu = deep_mlp(4, 8, 2, seed=3)
    with on_device(META):
        meta = deep_mlp(4, 8, 2, seed=3)
    assert model_device(meta) == META and model_device(cpu).type == "cpu"
    # an explicit device wins over the unit's
    with on_device(META):
        again = deep_mlp(4, 8, 2, seed=3, device="cpu")
    for a, b in zip(cpu.parameters(), again.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_trainer_uses_the_settings_device_or_else_the_units():
    settings = TrainSettings(steps=1)
    with on_device(META):
        trainer = Trainer(nn.Linear(2, 2), settings, lambda step: (torch.ones(1, 2),))
    assert trainer.dist.device == META and model_device(trainer.model) == META
    with on_device(META):
        pinned = Trainer(nn.Linear(2, 2), TrainSettings(steps=1, device="cpu"),
                         lambda step: (torch.ones(1, 2),))
    assert pinned.dist.device.type == "cpu"


def test_language_models_compile_on_cuda_only_unless_told():
    from actlab.recipes.language_model import LMScale

    scale = LMScale(steps=10, warmup=2)
    assert scale.compiles() is False and scale.train_config().compile is False
    with on_device("cuda"):  # a device name is enough: nothing runs there
        assert scale.compiles() is True and scale.train_config().compile is True
        assert LMScale(steps=10, warmup=2, compile_model="off").train_config().compile is False
    assert LMScale(steps=10, warmup=2, compile_model="on").compiles() is True
