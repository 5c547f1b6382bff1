"""The gpt-nano recipe of "Bug or Feature²" App. D.6: the trapezoidal schedule against its
closed form, the recipe's values at any number of steps, the paper's model walked on the meta
device, and rotary positions."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
import torch
from torch import nn

from actlab.errors import ConfigError
from actlab.nn.gpt import GPT, GPTConfig
from actlab.recipes.language_model import LMScale
from actlab.runner.config import build_config
from actlab.train.loop import TrainConfig, lr_at, make_engine_optimizer
from actlab.train.settings import TrainSettings


def trapezoid(step: int, lr: float, steps: int, warmup: int, warmdown: int) -> float:
    """Linear up over ``warmup`` updates, constant, linear down to 0 at ``steps``."""
    if step < warmup:
        return lr * (step + 1) / warmup
    if step < steps - warmdown:
        return lr
    return lr * (steps - step) / warmdown


@pytest.mark.parametrize("steps,warmup,warmdown", [(20, 5, 6), (7168, 2000, 2028), (10, 0, 10),
                                                   (9, 3, 0)])
def test_trapezoid_schedule_is_linear_up_constant_linear_down_to_zero(steps, warmup, warmdown):
    config = TrainSettings(lr=0.5, steps=steps, warmup=warmup, warmdown=warmdown,
                           schedule="trapezoid")
    values = [lr_at(s, config) for s in range(steps)]
    assert values == pytest.approx([trapezoid(s, 0.5, steps, warmup, warmdown)
                                    for s in range(steps)], rel=1e-15)
    assert max(values) == 0.5 and all(v > 0 for v in values)
    if warmdown:  # the warm-down is a line that reaches 0 one update after the last
        down = values[steps - warmdown:]
        slopes = {round(b - a, 12) for a, b in zip(down, down[1:])}
        assert slopes <= {round(-0.5 / warmdown, 12)} and down[-1] == pytest.approx(0.5 / warmdown)


def test_trapezoid_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="only the trapezoid schedule") as err:
        TrainSettings(schedule="cosine", warmdown=3)
    assert err.value.field == "warmdown"
    with pytest.raises(ConfigError, match="exceeds steps") as err:
        TrainSettings(schedule="trapezoid", steps=10, warmup=6, warmdown=5)
    assert err.value.field == "warmdown"


def test_recipe_keeps_the_papers_fractions_of_any_number_of_steps() -> None:
    for steps in (300, 160, 2000, 7168):
        config = LMScale(steps=steps, compile_model="off").train_config()
        assert (config.optimizer, config.schedule) == ("muon", "trapezoid")
        assert config.warmup == round(steps * 2000 / 7168)
        assert config.warmdown == round(steps * 2028 / 7168)
        assert config.eval_every == round(steps * 1024 / 7168)
        assert (config.lr, config.weight_decay, config.grad_clip) == (0.005, 0.0, 0.0)
        assert (config.beta1, config.beta2, config.muon_lr_ratio) == (0.9, 0.95, 0.1)
    paper = LMScale(steps=7168).train_config()
    assert (paper.warmup, paper.warmdown, paper.eval_every) == (2000, 2028, 1024)


def test_another_optimizer_brings_back_the_earlier_recipe() -> None:
    earlier = TrainConfig()
    config = LMScale(optimizer="adamw", compile_model="off").train_config()
    for name in ("lr", "schedule", "warmup", "weight_decay", "grad_clip", "eval_every",
                 "beta2", "min_lr_ratio", "decay_vectors"):
        assert getattr(config, name) == getattr(earlier, name), name
    assert config.warmdown == 0
    # set fields win over the recipe; the warm-up and warm-down follow the schedule
    mixed = LMScale(optimizer="adamw", schedule="trapezoid", steps=700, lr=0.01).train_config()
    assert (mixed.lr, mixed.warmup, mixed.warmdown, mixed.eval_every) == (0.01, 195, 198, 100)
    cosine = LMScale(schedule="cosine", warmup=30).train_config()
    assert (cosine.optimizer, cosine.warmup, cosine.warmdown) == ("muon", 30, 0)


def _param_count(c: GPTConfig) -> int:
    """Parameters of our GPT from its configuration: tied head, learned positions, LayerNorm
    with bias, biases everywhere, a plain FFN of width ``mlp_ratio * d``."""
    d, m = c.n_embd, int(c.mlp_ratio * c.n_embd)
    attention = (d * 3 * d + 3 * d) + (d * d + d)
    ffn = (d * m + m) + (m * d + d)
    return c.vocab_size * d + c.block_size * d + c.n_layer * (2 * 2 * d + attention + ffn) + 2 * d


def test_set_model_gpt_nano_builds_the_papers_model_walked_on_meta() -> None:
    scale = build_config(LMScale, {"model": "gpt-nano"}, base=LMScale(n_layer=2))
    config = scale.model_config(activation="relu")
    assert (config.n_layer, config.n_head, config.n_embd) == (12, 12, 768)
    assert (config.vocab_size, config.block_size) == (50_257, 2048)
    # nn.Embedding's own init draws on meta through a slow decomposition; GPT re-initialises
    # every weight anyway (and draws nothing on meta)
    with mock.patch.object(nn.Embedding, "reset_parameters", lambda self: None), \
            torch.device("meta"):
        model = GPT(config, seed=0)
    assert model.num_params() == sum(p.numel() for p in model.parameters()) == _param_count(config)
    idx = torch.zeros(1, config.block_size, dtype=torch.long, device="meta")
    logits, loss = model(idx, targets=idx)
    assert logits.shape == (1, 2048, 50_257) and logits.is_meta and loss.shape == ()
    loss.backward()
    assert all(p.grad is not None and p.grad.is_meta for p in model.parameters())
    adam, muon = make_engine_optimizer(model, scale.train_config()).optimizers
    assert len(muon.param_groups[0]["params"]) == 4 * 12
    # the released code's architecture: rotary positions, RMSNorm, no biases
    theirs = LMScale(model="gpt-nano", positions="rotary", norm="rmsnorm", bias=False)
    with mock.patch.object(nn.Embedding, "reset_parameters", lambda self: None), \
            torch.device("meta"):
        other = GPT(theirs.model_config())
    d, layers = 768, 12
    assert other.num_params() == 50_257 * d + layers * (2 * d + 12 * d * d) + d


def test_model_preset_and_vocabulary_checks(tmp_path) -> None:
    with pytest.raises(ConfigError, match="must be one of custom, gpt-nano") as err:
        LMScale(model="gpt-2")
    assert err.value.field == "model"
    with pytest.raises(ConfigError, match=">= 256") as err:
        LMScale(vocab_size=100)
    assert err.value.field == "vocab_size"
    from actlab.data.shards import write_shard

    for split in ("train", "val"):
        write_shard(tmp_path / f"{split}_000.bin", np.arange(50))
    assert LMScale(vocab_size=100, data=f"shards:{tmp_path}").vocab_size == 100


@pytest.mark.parametrize("make, why", [
    (lambda root: root / "missing", "no such text file or folder"),
    (lambda root: (root / "empty.txt").write_text("") and None or root / "empty.txt", "is empty"),
    (lambda root: (root / "none").mkdir() or root / "none", "no non-empty files"),
    (lambda root: f"shards:{root / 'missing'}", "no such shard folder"),
    (lambda root: (root / "s").mkdir() or f"shards:{root / 's'}", "train"),
])
def test_a_bad_data_path_is_refused_before_any_unit_runs(tmp_path, make, why) -> None:
    from actlab.runner.driver import RunOptions, prepare_run

    data = str(make(tmp_path))
    with pytest.raises(ConfigError, match=why) as err:
        LMScale(data=data)
    assert err.value.field == "data"
    with pytest.raises(ConfigError, match=why):  # at planning: no run directory is made
        prepare_run("lm-shift", "quick", {"data": data}, options=RunOptions(out=tmp_path / "runs"))
    assert not (tmp_path / "runs").exists()


def test_rotary_attention_depends_on_relative_positions_only() -> None:
    config = GPTConfig(n_layer=1, n_head=2, n_embd=8, block_size=16, positions="rotary")
    model = GPT(config, seed=0)
    assert model.wpe is None and "wpe.weight" not in model.state_dict()
    from actlab.nn.gpt import rotate

    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 1, 1, 4, generator=g), torch.randn(1, 1, 1, 4, generator=g)
    angles = torch.outer(torch.arange(16, dtype=torch.float32), model.blocks[0].attn.inv_freq)

    def score(i: int, j: int) -> float:  # the query at position i against the key at j
        return float((rotate(q, angles[i:i + 1]) * rotate(k, angles[j:j + 1])).sum())

    for i, j in ((2, 5), (0, 0), (9, 3)):
        for shift in (1, 6):
            assert score(i + shift, j + shift) == pytest.approx(score(i, j), abs=1e-5)
    assert abs(score(2, 5) - score(2, 6)) > 1e-3  # the offset itself matters
    idx = torch.randint(0, 256, (2, 16), generator=g)
    logits, loss = model(idx, targets=idx)
    loss.backward()
    assert logits.shape == (2, 16, 256) and torch.isfinite(loss)
    with pytest.raises(ConfigError, match="even head width"):
        GPTConfig(n_embd=6, n_head=2, positions="rotary")
    with pytest.raises(ConfigError, match="learned, rotary"):
        GPTConfig(positions="alibi")
