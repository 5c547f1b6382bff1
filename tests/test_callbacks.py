"""Callbacks: schedules, ranks, divergence, gradient angles and resumption from checkpoints."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from actlab.train.callbacks import (
    Callback,
    Checkpoint,
    CurvatureSchedule,
    DivergenceStop,
    EvalLog,
    GradientAngle,
    LossHistory,
    ProbeStep,
)
from actlab.train.distributed import DistInfo
from actlab.train.ensemble import Ensemble, EnsembleTrainer
from actlab.train.functional_optim import FunctionalSGD
from actlab.train.loop import Trainer
from actlab.train.settings import TrainSettings

X = torch.randn(64, 3, generator=torch.Generator().manual_seed(0))
Y = X @ torch.tensor([[1.0], [-2.0], [0.5]])


def _batch(step: int):
    i = (step * 8) % 64
    return X[i:i + 8], Y[i:i + 8]


def _loss(model, batch):
    return nn.functional.mse_loss(model(batch[0]), batch[1])


def _trainer(tmp_path=None, steps=10, callbacks=(), lr=0.05, dist=None):
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    settings = TrainSettings(optimizer="sgd", lr=lr, steps=steps, log_every=1)
    return Trainer(model, settings, _batch, loss_fn=_loss, callbacks=callbacks,
                   checkpoint_dir=tmp_path, dist=dist)


class _Recorder(Callback):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.seen = []

    def on_step(self, trainer, step, loss):
        self.seen.append(step)


def test_hooks_run_only_when_the_schedule_fires():
    every, listed = _Recorder(every=4), _Recorder(at=[3, 7, 99])
    _trainer(steps=10, callbacks=[every, listed]).fit()
    assert every.seen == [0, 4, 8]
    assert listed.seen == [3, 7]


def test_eval_log_and_loss_history_record_what_the_engine_computed():
    log = EvalLog(lambda tr: {"w": float(tr.model.weight[0, 0].detach())}, every=5)
    history = LossHistory()
    trainer = _trainer(steps=10, callbacks=[log, history])
    result = trainer.fit()
    assert [r["step"] for r in log.rows] == [0, 5, 10]
    assert log.rows[-1]["w"] == float(trainer.model.weight[0, 0].detach())
    # with log_every=1 the engine's history holds each batch loss: the same numbers
    assert history.values() == pytest.approx([h["train_loss"] for h in result.history], rel=0,
                                             abs=0)


def test_divergence_stop_ends_the_run_before_the_bad_update():
    stop = DivergenceStop()
    trainer = _trainer(steps=50, callbacks=[stop], lr=1e6)
    result = trainer.fit()
    assert result.status == "diverged"
    assert not math.isfinite(stop.loss_at_stop)
    assert result.step < 50
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())


def test_callbacks_know_their_rank_and_only_rank_zero_writes(tmp_path):
    ckpt = Checkpoint(every=2)
    trainer = _trainer(tmp_path / "r1", steps=4, callbacks=[ckpt], dist=DistInfo(rank=1))
    trainer.fit()
    assert ckpt.rank == 1 and not ckpt.writes
    assert ckpt.saved == [] and not (tmp_path / "r1").exists()
    ckpt0 = Checkpoint(every=2)
    _trainer(tmp_path / "r0", steps=4, callbacks=[ckpt0]).fit()
    assert ckpt0.saved == [2, 4] and (tmp_path / "r0" / "last.safetensors").exists()


class _Crash(Callback):
    def __init__(self, at_step):
        super().__init__(at=[at_step])

    def on_step(self, trainer, step, loss):
        raise KeyboardInterrupt


def test_resume_restores_callback_state(tmp_path):
    def callbacks():
        return [EvalLog(lambda tr: {"b": float(tr.model.bias[0].detach())}, every=3), LossHistory(),
                Checkpoint(every=2)]

    whole = callbacks()
    _trainer(tmp_path / "whole", steps=9, callbacks=whole).fit()
    cut = callbacks()
    with pytest.raises(KeyboardInterrupt):
        _trainer(tmp_path / "cut", steps=9, callbacks=[*cut, _Crash(7)]).fit()
    resumed = callbacks()
    trainer = _trainer(tmp_path / "cut", steps=9, callbacks=[*resumed, _Crash(99)])
    trainer.fit(resume=True)
    assert resumed[0].rows == whole[0].rows  # rows before the checkpoint came from it
    assert resumed[1].values() == whole[1].values()
    assert [r["step"] for r in resumed[0].rows] == [0, 3, 6, 9]


def test_gradient_angle_and_curvature_schedule_on_the_ensemble():
    g = torch.Generator().manual_seed(3)
    models = {c: [nn.Linear(3, 2) for _ in range(2)] for c in ("a", "b")}
    for c in models:
        for m in models[c]:
            for p in m.parameters():
                p.data = torch.randn(p.shape, generator=g)
    ens = Ensemble(models)
    trainer = EnsembleTrainer(ens, nn.functional.mse_loss, FunctionalSGD(lr=0.1),
                              keep_freed_memory=False)
    x, y = torch.randn(2, 5, 3, generator=g), torch.randn(2, 5, 2, generator=g)
    members = {c: [ens.member(c, s) for s in range(2)] for c in ("a", "b")}
    angle = GradientAngle(at=[1], first=[0, 1], second=[2, 3])
    curv = CurvatureSchedule(lambda tr: {"a0": (tr.ensemble.member("a", 0), (x[0], y[0]))},
                             loss="mse", at=[0])
    trainer.fit(1, lambda step: (x, y), [angle, curv])
    for s in range(2):
        flat = []
        for c in ("a", "b"):
            m = members[c][s]
            grads = torch.autograd.grad(nn.functional.mse_loss(m(x[s]), y[s]), list(m.parameters()))
            flat.append(torch.cat([gr.reshape(-1) for gr in grads]).double())
        cos = torch.dot(flat[0], flat[1]) / (flat[0].norm() * flat[1].norm())
        assert angle.angles[1][s] == pytest.approx(math.degrees(math.acos(cos)), abs=1e-4)
    # a linear model under mean squared error: the Hessian is 2/(n*d_out) * X^T X per output
    xb = torch.cat([x[0], torch.ones(5, 1)], 1).double()
    top = float(torch.linalg.eigvalsh(2 / (5 * 2) * xb.T @ xb)[-1])
    assert curv.rows[0]["step"] == 0
    assert curv.rows[0]["lambda_max_hessian"] == pytest.approx(top, rel=1e-3)
    assert curv.rows[0]["lambda_max_gn"] == pytest.approx(top, rel=1e-3)


def test_probe_step_closes_one_probe_step_per_update_as_a_manual_loop_does():
    from actlab.probe.probe import Probe

    def mlp():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(3, 6), nn.ReLU(), nn.Linear(6, 1))

    engine_model, loop_model = mlp(), mlp()
    probe = Probe(engine_model, every=[0, 2, 5], metrics=["preact_neg_frac"], weights=False)
    settings = TrainSettings(optimizer="sgd", lr=0.05, steps=6)
    Trainer(engine_model, settings, _batch, loss_fn=_loss, callbacks=[ProbeStep(probe)]).fit()
    reference = Probe(loop_model, every=[0, 2, 5], metrics=["preact_neg_frac"], weights=False)
    opt = torch.optim.SGD(loop_model.parameters(), lr=0.05)
    for step in range(6):
        loss = _loss(loop_model, _batch(step))
        loss.backward()
        opt.step()
        opt.zero_grad()
        reference.step()
    got, want = probe.table(), reference.table()
    probe.close()
    reference.close()
    assert sorted(set(got.step)) == [0, 2, 5]
    assert got.value.tolist() == want.value.tolist()
