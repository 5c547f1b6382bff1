"""The engine against hand-written loops: same batches, same updates, same numbers."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from torch import nn

from actlab.errors import ConfigError
from actlab.train.callbacks import LossHistory
from actlab.train.ensemble import Ensemble, EnsembleTrainer
from actlab.train.loop import TrainConfig
from actlab.train.optim import make_functional_optimizer
from actlab.train.settings import TrainSettings, settings_from
from actlab.train.supervised import train


def _model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))


@pytest.mark.parametrize("optimizer", ["adam", "momentum"])
def test_supervised_train_equals_a_plain_torch_loop(optimizer):
    g = torch.Generator().manual_seed(5)
    x, y = torch.randn(50, 4, generator=g), torch.randint(0, 3, (50,), generator=g)
    settings = TrainSettings(optimizer=optimizer, lr=0.01, steps=23, batch_size=16,
                             loss="cross_entropy")
    engine_model, loop_model = _model(0), _model(0)
    result = train(engine_model, x, y, settings, generator=torch.Generator().manual_seed(7))

    # the reference: epochs of a seeded permutation, last partial batch dropped
    opt = (torch.optim.Adam(loop_model.parameters(), lr=0.01) if optimizer == "adam" else
           torch.optim.SGD(loop_model.parameters(), lr=0.01, momentum=0.9))
    perm_gen, losses, done = torch.Generator().manual_seed(7), [], 0
    while done < 23:
        order = torch.randperm(50, generator=perm_gen)
        for start in range(0, 50 - 16 + 1, 16):
            if done == 23:
                break
            idx = order[start:start + 16]
            loss = nn.functional.cross_entropy(loop_model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
            done += 1
    assert result.status == "ok" and result.steps == 23
    assert result.losses == losses
    for a, b in zip(engine_model.parameters(), loop_model.parameters()):
        assert torch.equal(a, b)


def test_supervised_train_stops_at_the_first_non_finite_loss():
    x, y = torch.randn(40, 4), torch.randn(40, 3)
    settings = TrainSettings(optimizer="sgd", lr=1e9, steps=30, batch_size=8, loss="half_sse")
    result = train(_model(1), x, y, settings, generator=torch.Generator().manual_seed(0))
    assert result.status == "diverged"
    assert len(result.losses) == result.steps + 1
    assert not torch.isfinite(torch.tensor(result.losses[-1]))


def test_ensemble_fit_equals_stepping_by_hand():
    def members():
        return [_model(s) for s in range(3)]

    g = torch.Generator().manual_seed(2)
    xs, ys = torch.randn(6, 3, 10, 4, generator=g), torch.randn(6, 3, 10, 3, generator=g)
    by_hand = EnsembleTrainer(Ensemble(members()), nn.functional.mse_loss,
                              make_functional_optimizer("adam", 1e-2), keep_freed_memory=False)
    expected = [by_hand.step(xs[k], ys[k]).losses["default"].tolist() for k in range(6)]
    fitted = EnsembleTrainer(Ensemble(members()), nn.functional.mse_loss,
                             make_functional_optimizer("adam", 1e-2), keep_freed_memory=False)
    history = LossHistory()
    fitted.fit(6, lambda k: (xs[k], ys[k]), [history])
    assert history.values() == expected
    for name, value in by_hand.ensemble.params["default"].items():
        assert torch.equal(value, fitted.ensemble.params["default"][name])


def test_settings_compose_from_flat_config_fields():
    @dataclass
    class Flat:
        lr: float = 0.3
        steps: int = 7
        batch_size: int = 5
        hidden: int = 99  # not a training setting: ignored

    settings = settings_from(Flat(), loss="half_sse")
    assert (settings.lr, settings.steps, settings.batch_size, settings.loss) == (0.3, 7, 5,
                                                                                 "half_sse")
    assert isinstance(TrainConfig(), TrainSettings)  # the language-model defaults, same type
    with pytest.raises(ConfigError, match="optimizer: .*adamw"):
        TrainSettings(optimizer="adamv")
    with pytest.raises(ConfigError, match="loss"):
        settings_from(Flat(), loss="l2")
    with pytest.raises(ConfigError, match="lr"):
        TrainSettings(lr=0)
