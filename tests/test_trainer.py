"""The shared trainer: schedule against PyTorch's schedulers, resume, divergence, checkpoints."""

from __future__ import annotations

import math

import pytest
import torch
from safetensors import safe_open

from actlab.errors import ConfigError
from actlab.nn.gpt import GPT, GPTConfig
from actlab.train.loop import (
    TrainConfig,
    Trainer,
    default_loss,
    load_checkpoint,
    lr_at,
    measure_step,
)

TINY = GPTConfig(vocab_size=32, block_size=8, n_layer=2, n_head=2, n_embd=16)


def _batch(step: int, size: int = 4):
    g = torch.Generator().manual_seed(100 + step)
    x = torch.randint(0, 32, (size, 9), generator=g)
    return x[:, :-1], x[:, 1:]


def _eval_batches():
    return [_batch(10_000 + i) for i in range(2)]


@pytest.mark.parametrize("schedule", ["cosine", "linear"])
def test_schedule_matches_pytorch_schedulers(schedule: str) -> None:
    config = TrainConfig(steps=50, lr=0.2, warmup=7, schedule=schedule, min_lr_ratio=0.1)
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=config.lr)
    warm = torch.optim.lr_scheduler.LinearLR(opt, 1 / 7, 1.0, total_iters=6)
    if schedule == "cosine":
        decay = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=43, eta_min=0.02)
    else:
        decay = torch.optim.lr_scheduler.LinearLR(opt, 1.0, 0.1, total_iters=43)
    sched = torch.optim.lr_scheduler.SequentialLR(opt, [warm, decay], milestones=[7])
    for step in range(50):
        assert lr_at(step, config) == pytest.approx(opt.param_groups[0]["lr"], rel=1e-9), step
        opt.step()
        sched.step()
    assert lr_at(49 + 1, config) == pytest.approx(0.02)


@pytest.mark.parametrize("steps", [10, 37, 200])
def test_onecycle_is_pytorchs_one_cycle_lr(steps: int) -> None:
    config = TrainConfig(steps=steps, lr=6e-4, warmup=0, schedule="onecycle")
    opt = torch.optim.AdamW([torch.zeros(1, requires_grad=True)], lr=config.lr)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=6e-4, total_steps=steps,
                                                cycle_momentum=False)
    for step in range(steps):
        assert lr_at(step, config) == pytest.approx(opt.param_groups[0]["lr"], rel=1e-9), step
        opt.step()
        if step < steps - 1:  # OneCycleLR refuses to step past total_steps
            sched.step()
    with pytest.raises(ConfigError, match="onecycle"):
        TrainConfig(steps=steps, warmup=3, schedule="onecycle")


def test_warm_up_from_a_fraction_of_the_rate_is_pytorchs_linear_lr() -> None:
    # "Bug or Feature²" App. D.3: a linear warm-up from 1e-4 to 1e-3, then cosine to 0
    config = TrainConfig(steps=30, lr=1e-3, warmup=5, warmup_from=0.1, schedule="cosine",
                         min_lr_ratio=0.0)
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=config.lr)
    warm = torch.optim.lr_scheduler.LinearLR(opt, 0.1 + 0.9 / 5, 1.0, total_iters=4)
    decay = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=25, eta_min=0.0)
    sched = torch.optim.lr_scheduler.SequentialLR(opt, [warm, decay], milestones=[5])
    for step in range(30):
        assert lr_at(step, config) == pytest.approx(opt.param_groups[0]["lr"], rel=1e-9), step
        opt.step()
        sched.step()
    assert lr_at(0, TrainConfig(warmup=5, lr=1.0)) == pytest.approx(0.2)  # from 0 by default


def _trainer(tmp_path, steps: int = 8, on_step=None, seed: int = 0, **over) -> Trainer:
    config = TrainConfig(steps=steps, lr=3e-3, warmup=2, eval_every=3, log_every=2,
                         checkpoint_every=2, **over)
    return Trainer(GPT(TINY, seed=seed), config, _batch, _eval_batches,
                   checkpoint_dir=tmp_path, on_step=on_step)


def test_resume_after_interruption_equals_uninterrupted_run(tmp_path) -> None:
    full = _trainer(tmp_path / "full")
    full_result = full.fit()

    class Killed(Exception):
        pass

    def kill_at_5(step: int, loss: float) -> None:
        if step == 5:
            raise Killed

    with pytest.raises(Killed):
        _trainer(tmp_path / "cut", on_step=kill_at_5).fit()  # last checkpoint: step 4
    resumed = _trainer(tmp_path / "cut", seed=123)  # different init: must come from the file
    assert resumed.load_checkpoint() and resumed.step == 4
    result = resumed.fit(resume=True)
    assert result.status == "ok" and result.step == 8
    for (name, a), (_, b) in zip(full.model.named_parameters(), resumed.model.named_parameters()):
        assert torch.equal(a, b), name
    assert result.history == full_result.history
    state_a, state_b = full.optimizer.state_dict(), resumed.optimizer.state_dict()
    for key, value in state_a["state"].items():
        for name, tensor in value.items():
            assert torch.equal(torch.as_tensor(tensor), torch.as_tensor(state_b["state"][key][name]))


def test_checkpoint_is_safetensors_and_loads_into_a_fresh_model(tmp_path) -> None:
    trainer = _trainer(tmp_path, steps=2)
    trainer.fit()
    path = tmp_path / "last.safetensors"
    with safe_open(str(path), framework="pt") as f:
        keys = set(f.keys())
        assert f.metadata()["step"] == "2"
    assert "model.wte.weight" in keys and any(k.startswith("optim.") for k in keys)
    fresh = GPT(TINY, seed=9)
    meta = load_checkpoint(path, fresh)
    assert meta["step"] == 2 and meta["extra"]["config"]["steps"] == 2
    assert fresh.lm_head.weight is fresh.wte.weight  # tying survives loading
    x, y = _batch(0)
    assert torch.equal(fresh(x, y)[1], trainer.model(x, y)[1])


def test_non_finite_loss_is_recorded_as_diverged(tmp_path) -> None:
    calls = []

    def loss_fn(model, batch):
        calls.append(1)
        loss = default_loss(model, batch)
        return loss * math.inf if len(calls) == 4 else loss

    trainer = Trainer(GPT(TINY, seed=0), TrainConfig(steps=10, warmup=0, eval_every=0), _batch,
                      loss_fn=loss_fn)
    result = trainer.fit()
    assert result.status == "diverged" and result.step == 3
    assert result.history[-1]["diverged"] == 1.0
    assert not math.isfinite(result.history[-1]["train_loss"])


def test_eval_restores_mode_and_bf16_autocast_runs() -> None:
    model = GPT(TINY, seed=0).eval()
    trainer = Trainer(model, TrainConfig(steps=2, dtype="bfloat16", eval_every=1), _batch,
                      _eval_batches)
    value = trainer.evaluate()
    assert math.isfinite(value) and not model.training
    result = trainer.fit()
    assert result.status == "ok" and len(result.series("val_loss")) == 3  # steps 0, 1, 2


def test_measure_step_counts_saved_activations() -> None:
    small = measure_step(GPT(TINY, seed=0), _batch(0, size=2), repeats=1, warmup=0)
    large = measure_step(GPT(TINY, seed=0), _batch(0, size=8), repeats=1, warmup=0)
    params = sum(p.numel() * 4 for p in GPT(TINY).parameters())
    assert small["tokens_per_s"] > 0
    assert small["peak_bytes"] > 4 * params
    # the tensors saved for backward grow in proportion to the batch
    act_small, act_large = small["peak_bytes"] - 4 * params, large["peak_bytes"] - 4 * params
    assert act_large == pytest.approx(4 * act_small, rel=0.1)


def test_bad_config_names_field() -> None:
    with pytest.raises(ConfigError) as err:
        TrainConfig(schedule="cosin")
    assert err.value.field == "schedule" and "cosine" in str(err.value)
    with pytest.raises(ConfigError) as err:
        TrainConfig(dtype="fp16")
    assert err.value.field == "dtype"
    with pytest.raises(ConfigError):
        TrainConfig(steps=0)


def test_language_model_optimizer_decays_matrices_only_and_other_settings_train_too() -> None:
    model = GPT(TINY, seed=0)
    trainer = Trainer(model, TrainConfig(steps=2, warmup=0, eval_every=0), _batch)
    decay, no_decay = trainer.optimizer.param_groups
    assert isinstance(trainer.optimizer, torch.optim.AdamW)
    assert decay["weight_decay"] == 0.1 and all(p.dim() >= 2 for p in decay["params"])
    assert no_decay["weight_decay"] == 0.0 and all(p.dim() < 2 for p in no_decay["params"])
    assert decay["betas"] == (0.9, 0.95)
    # any TrainSettings drives the same engine: plain SGD, constant rate, no clipping
    from actlab.train.settings import TrainSettings

    sgd = Trainer(GPT(TINY, seed=0), TrainSettings(optimizer="sgd", lr=0.1, steps=3), _batch)
    assert type(sgd.optimizer) is torch.optim.SGD
    assert sgd.fit().status == "ok" and sgd.step == 3
