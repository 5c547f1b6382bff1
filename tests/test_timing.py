"""StepClock: one interval per update, measured the way the device needs."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from actlab.train.placement import on_device
from actlab.train.settings import TrainSettings
from actlab.train.supervised import train
from actlab.train.timing import StepClock


def test_one_interval_per_update_on_the_cpu():
    clock = StepClock()
    assert clock.kind == "thread_cpu"
    x, y = torch.randn(32, 4), torch.randint(0, 3, (32,))
    clock.stamp()
    train(nn.Linear(4, 3), x, y, TrainSettings(steps=7, batch_size=8),
          generator=torch.Generator().manual_seed(0), callbacks=[clock.callback()])
    seconds = clock.intervals()
    assert seconds.shape == (7,) and (seconds >= 0).all()


def test_the_clock_follows_the_units_device():
    with on_device("meta"):
        assert StepClock().kind == "wall"
    assert StepClock("cpu").kind == "thread_cpu"


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_steps_are_timed_by_events():
    clock = StepClock("cuda")
    assert clock.kind == "cuda_events"
    a = torch.randn(2048, 2048, device="cuda")
    clock.stamp()
    for _ in range(3):
        a = a @ a / 2048
        clock.stamp()
    seconds = clock.intervals()
    assert seconds.shape == (3,) and (seconds > 0).all()
