"""End to end: a tiny DiT trained on the digits samples digits of the class it is asked for.

The bars were fixed before the first run (our choice): the EMA model's guided samples must
have a lower FID (digits-classifier features, against the test split) than the untrained
model's samples and than a constant mean image, and the feature classifier must assign at
least half of the class-conditional samples to their class (chance is 0.1).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from actlab.data.digits import load_digits_pixels
from actlab.measure.feature_classifier import digits_feature_network
from actlab.measure.fid import generative_metrics
from actlab.nn.dit import DiT, DiTConfig
from actlab.recipes.diffusion import GaussianDiffusion, ddim_sample, diffusion_loss, train_diffusion
from actlab.train.settings import TrainSettings

pytestmark = pytest.mark.slow  # the module trains one DiT for all its tests

CONFIG = DiTConfig(input_size=8, patch_size=2, in_channels=1, hidden_size=64, depth=2,
                   num_heads=4, num_classes=10, learn_sigma=False)
LABELS = torch.arange(10).repeat_interleave(20)
CLASS_RATE_BAR = 0.5


def _sample(model: torch.nn.Module) -> torch.Tensor:
    model.eval()
    shape = (len(LABELS), 1, 8, 8)
    return ddim_sample(model, GaussianDiffusion.linear(), shape, LABELS, steps=50,
                       cfg_scale=2.0, generator=torch.Generator().manual_seed(1)).clamp(-1, 1)


@pytest.fixture(scope="module")
def outcome(tmp_path_factory: pytest.TempPathFactory) -> dict:
    torch.manual_seed(0)
    with _one_thread():
        data = load_digits_pixels()
        network = digits_feature_network(8, 1, cache_dir=tmp_path_factory.mktemp("cache"))
        model = DiT(CONFIG, seed=0)
        untrained = _sample(model)
        settings = TrainSettings(optimizer="adamw", lr=3e-3, steps=1000, batch_size=64)
        run = train_diffusion(model, data.x_train, data.y_train, settings, ema_decay=0.99,
                              seed=0)
        trained = _sample(run.ema)
        mean_image = data.x_train.mean(0, keepdim=True).expand_as(trained)
        scores = {name: generative_metrics(x, data.x_test, network)["fid_digits-classifier"]
                  for name, x in [("trained", trained), ("untrained", untrained),
                                  ("mean", mean_image)]}
        rate = (network.logits(trained).argmax(1) == LABELS).double().mean().item()
    return {"fid": scores, "class_rate": rate, "losses": run.losses}


class _one_thread:
    def __enter__(self) -> None:
        self.threads = torch.get_num_threads()
        torch.set_num_threads(1)  # the numbers do not depend on the machine's core count

    def __exit__(self, *exc: object) -> None:
        torch.set_num_threads(self.threads)


def test_training_lowers_the_loss(outcome: dict) -> None:
    losses = outcome["losses"]
    assert sum(losses[-100:]) / 100 < 0.5 * sum(losses[:10]) / 10


def test_trained_samples_beat_the_untrained_model_and_the_mean_image(outcome: dict) -> None:
    fid = outcome["fid"]
    assert fid["trained"] < fid["untrained"], fid
    assert fid["trained"] < fid["mean"], fid


def test_class_conditional_samples_are_of_their_class(outcome: dict) -> None:
    assert outcome["class_rate"] >= CLASS_RATE_BAR, outcome["class_rate"]


def test_label_dropout_is_drawn_from_the_loss_generator() -> None:
    model = DiT(dataclasses.replace(CONFIG, class_dropout_prob=0.5), seed=0)
    x0, y = torch.rand(16, 1, 8, 8) * 2 - 1, torch.arange(16) % 10
    diffusion = GaussianDiffusion.linear()

    def loss(seed: int) -> float:
        torch.manual_seed(seed)  # the global RNG must not matter
        return diffusion_loss(diffusion, model, x0, y,
                              generator=torch.Generator().manual_seed(3)).item()

    assert loss(0) == loss(1)
    drops = []
    for seed in range(2):
        seen = []
        handle = model.y_embedder.register_forward_hook(
            lambda m, args, out, seen=seen: seen.append(out.detach().clone()))
        diffusion_loss(diffusion, model, x0, y, generator=torch.Generator().manual_seed(seed))
        handle.remove()
        drops.append(seen[0])
    assert not torch.equal(drops[0], drops[1])  # a different seed drops other labels
