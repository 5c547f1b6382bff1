"""LossSpikeCallback in the engine, the Hugging Face Trainer and Lightning: a planted loss
spike stops the run at that step, a smooth run never stops, log mode records the spike."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from actlab.errors import ConfigError
from actlab.train.loop import Trainer
from actlab.train.loss_spike import LossSpikeCallback, SpikeGuard
from actlab.train.settings import TrainSettings

SPIKE = 30  # the update (1-based) whose batch is planted
X = torch.randn(64, 3, generator=torch.Generator().manual_seed(0))
Y = X @ torch.tensor([[1.0], [-2.0], [0.5]]) + 0.1 * torch.randn(
    64, 1, generator=torch.Generator().manual_seed(1)
)


def _batches(planted: bool):
    def batch(step: int):
        i = (step * 8) % 64
        x, y = X[i : i + 8], Y[i : i + 8]
        return (x, y * 50.0) if planted and step + 1 == SPIKE else (x, y)

    return batch


def _fit(callback, planted: bool, steps: int = 60):
    torch.manual_seed(0)
    settings = TrainSettings(optimizer="sgd", lr=0.05, steps=steps, log_every=1)
    trainer = Trainer(
        nn.Linear(3, 1),
        settings,
        _batches(planted),
        loss_fn=lambda m, b: nn.functional.mse_loss(m(b[0]), b[1]),
        callbacks=[callback],
    )
    return trainer, trainer.fit()


def test_guard_scores_against_the_window_and_keeps_spikes_out() -> None:
    guard = SpikeGuard(window=4, threshold=3.0, warmup=3)
    values = [1.0, 2.0, 3.0]
    for i, v in enumerate(values):
        assert not guard.observe(i, "loss", v)
    mean, std = 2.0, math.sqrt(2 / 3)
    assert guard.score("loss", 5.0) == pytest.approx((5.0 - mean) / std)
    guard.observe(3, "loss", 100.0)  # a spike: recorded, not added to the window
    assert [e["step"] for e in guard.events] == [3] and list(guard.history["loss"]) == values
    assert guard.score("loss", float("nan")) == math.inf  # non-finite: always a spike
    with pytest.raises(ConfigError, match="warmup"):
        SpikeGuard(window=4, warmup=5)
    with pytest.raises(ConfigError, match="action"):
        SpikeGuard(action="halt")


def test_engine_stops_at_the_planted_spike_and_prints_one_line(capsys) -> None:
    spike = LossSpikeCallback(action="stop")
    trainer, result = _fit(spike, planted=True)
    assert result.status == "loss_spike"
    assert trainer.step == SPIKE - 1  # the spiking update was skipped
    (event,) = spike.events
    assert (event["step"], event["series"]) == (SPIKE, "loss") and event["score"] > 6.0
    lines = [line for line in capsys.readouterr().out.splitlines() if "LossSpikeCallback" in line]
    assert len(lines) == 1 and f"step {SPIKE}" in lines[0] and "z-score" in lines[0]


def test_engine_smooth_run_never_stops() -> None:
    spike = LossSpikeCallback(action="stop")
    trainer, result = _fit(spike, planted=False)
    assert result.status != "loss_spike" and trainer.step == 60 and not spike.events
    assert len(spike.guard.history["grad_norm"]) == 50  # the gradient norm was watched


def test_engine_log_mode_records_the_spike_and_goes_on() -> None:
    spike = LossSpikeCallback(action="log", watch=["loss"])
    trainer, _ = _fit(spike, planted=True)
    assert trainer.step == 60
    # the first spike is the planted one (the update it made may spike later losses too)
    assert [(e["step"], e["series"]) for e in spike.events][:1] == [(SPIKE, "loss")]


def _hf_run(tmp_path, planted: bool, action: str = "stop"):
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from transformers import Trainer as HFTrainer
    from transformers import TrainingArguments

    from actlab.integrations.transformers import LossSpikeCallback as HFSpike

    class Model(nn.Module):
        """The Trainer shuffles the rows: the spike is planted in the loss of one call."""

        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 1)
            self.calls = 0

        def forward(self, x, labels=None):
            self.calls += 1
            loss = nn.functional.mse_loss(self.fc(x), labels)
            return {"loss": loss * 1000.0 if planted and self.calls == SPIKE else loss}

    class Rows(torch.utils.data.Dataset):
        def __len__(self):
            return 8 * 60

        def __getitem__(self, i):
            return {"x": X[i % 64], "labels": Y[i % 64]}

    torch.manual_seed(0)
    spike = HFSpike(action=action, watch=["loss"])
    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        max_steps=60,
        learning_rate=0.05,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        seed=0,
        disable_tqdm=True,
        dataloader_num_workers=0,
        optim="sgd",
        lr_scheduler_type="constant",
        max_grad_norm=0.0,
    )
    trainer = HFTrainer(Model(), args, train_dataset=Rows(), callbacks=[spike])
    trainer.train()
    return trainer, spike


def test_transformers_callback_stops_at_the_planted_spike(tmp_path) -> None:
    trainer, spike = _hf_run(tmp_path, planted=True)
    assert [(e["step"], e["series"]) for e in spike.events] == [(SPIKE, "loss")]
    assert trainer.state.global_step == SPIKE  # logged after its update: stops right after


def test_transformers_callback_smooth_run_never_stops(tmp_path) -> None:
    trainer, spike = _hf_run(tmp_path, planted=False)
    assert trainer.state.global_step == 60 and not spike.events


def test_lightning_callback_stops_at_the_planted_spike(tmp_path) -> None:
    pl = pytest.importorskip("lightning.pytorch")
    from actlab.integrations.lightning import LossSpikeCallback as PLSpike

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 1)

        def training_step(self, batch, batch_idx):
            return nn.functional.mse_loss(self.fc(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    def run(planted: bool):
        torch.manual_seed(0)
        batches = [_batches(planted)(s) for s in range(60)]
        spike = PLSpike(action="stop")
        trainer = pl.Trainer(
            max_steps=60,
            accelerator="cpu",
            devices=1,
            logger=False,
            callbacks=[spike],
            enable_progress_bar=False,
            enable_checkpointing=False,
            enable_model_summary=False,
        )
        trainer.fit(Module(), torch.utils.data.DataLoader(batches, batch_size=None))
        return trainer, spike

    trainer, spike = run(planted=True)
    assert [(e["step"], e["series"]) for e in spike.events][:1] == [(SPIKE, "loss")]
    assert trainer.global_step == SPIKE
    trainer, spike = run(planted=False)
    assert trainer.global_step == 60 and not spike.events
    assert len(spike.guard.history["grad_norm"]) == 50
