"""ProbeCallback inside a real Lightning Trainer: values read back from the logger's file."""

from __future__ import annotations

import copy
import csv
import math

import pytest
import torch
from torch import nn

pytest.importorskip("lightning")

import lightning.pytorch as pl  # noqa: E402
from lightning.pytorch.loggers import CSVLogger  # noqa: E402

from actlab.integrations.lightning import Curvature, ProbeCallback  # noqa: E402


class Tiny(pl.LightningModule):
    def __init__(self, dropout: float = 0.0) -> None:
        super().__init__()
        self.fc1 = nn.Linear(6, 12)
        self.act = nn.Tanh()
        self.drop = nn.Dropout(dropout)
        self.fc2 = nn.Linear(12, 3)

    def forward(self, x):
        return self.fc2(self.drop(self.act(self.fc1(x))))

    def loss(self, batch):
        x, y = batch
        return nn.functional.cross_entropy(self(x), y)

    def training_step(self, batch, batch_idx):
        return self.loss(batch)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _loader(x, y):
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=4)


def _fit(tmp_path, model, callback, data, **kw):
    trainer = pl.Trainer(max_steps=6, accelerator="cpu", devices=1, logger=CSVLogger(tmp_path),
                         callbacks=[callback] if callback else [], enable_progress_bar=False,
                         enable_checkpointing=False, enable_model_summary=False,
                         log_every_n_steps=1, **kw)
    trainer.fit(model, _loader(*data))
    return trainer


def _logged(trainer):
    """{metric name: {step: value}} from the CSV logger's metrics file."""
    out: dict[str, dict[int, float]] = {}
    with open(f"{trainer.logger.log_dir}/metrics.csv") as fh:
        for row in csv.DictReader(fh):
            for name, value in row.items():
                if name.startswith("actlab/") and value != "":
                    out.setdefault(name, {})[int(row["step"])] = float(value)
    return out


def _no_hooks(model):
    for module in model.modules():
        assert not module._forward_hooks and not module._forward_pre_hooks
    for p in model.parameters():
        assert not getattr(p, "_post_accumulate_grad_hooks", None)


def test_values_reach_the_logger_through_log_dict(tmp_path):
    torch.manual_seed(0)
    model = Tiny()
    initial = copy.deepcopy(model)
    x0 = torch.randn(6)
    data = (x0.expand(48, 6).clone(), torch.zeros(48, dtype=torch.long))  # identical rows
    held = (torch.randn(5, 6), torch.tensor([0, 1, 2, 0, 1]))
    callback = ProbeCallback(every=2, metrics=["act_mean", "preact_grad_mean"], weights=False,
                             curvature=Curvature(held, every=3, loss=Tiny.loss))
    trainer = _fit(tmp_path, model, callback, data, accumulate_grad_batches=2)
    logged = _logged(trainer)
    table = callback.table()
    probe = table[table.layer == "act"]
    # every=2 counts optimizer steps (two batches each): probe steps 0, 2, 4 and the last, 5
    assert sorted(probe.step.unique()) == [0, 2, 4, 5]
    assert set(logged) == {"actlab/act_mean/act", "actlab/preact_grad_mean/act",
                           "actlab/lambda_max/model"}
    # the logger's step is the 0-based optimizer step (Lightning repeats a callback's last
    # step value on the following steps, so only recorded steps are compared)
    for row in probe.itertuples():
        assert logged[f"actlab/{row.metric}/act"][row.step] == pytest.approx(row.value, rel=1e-6)
    with torch.no_grad():
        expected = torch.tanh(initial.fc1(x0)).mean().item()
    assert logged["actlab/act_mean/act"][0] == pytest.approx(expected, rel=1e-5)
    # λmax at steps 0, 3 and the last, 5, at the parameters of those steps' forward passes
    # (as the activation statistics): step 0's is the initial weights' dense Hessian's top value
    params = dict(initial.named_parameters())
    names, sizes = list(params), [p.numel() for p in params.values()]

    def loss(flat):
        chunks = {n: c.view_as(params[n]) for n, c in zip(names, torch.split(flat, sizes))}
        return nn.functional.cross_entropy(torch.func.functional_call(initial, chunks, held[0]),
                                           held[1])

    flat = torch.cat([p.detach().reshape(-1) for p in params.values()])
    dense_max = torch.linalg.eigvalsh(torch.autograd.functional.hessian(loss, flat)).max()
    curv = table[table.metric == "lambda_max"]
    assert curv.step.tolist() == [0, 3, 5]
    assert curv.value.iloc[0] == pytest.approx(dense_max.item(), rel=1e-3)
    for row in curv.itertuples():  # logged at the same step as the activation statistics
        assert logged["actlab/lambda_max/model"][row.step] == pytest.approx(row.value, rel=1e-6)
    _no_hooks(model)


def _data():
    gen = torch.Generator().manual_seed(1)
    return torch.randn(40, 6, generator=gen), torch.randint(0, 3, (40,), generator=gen)


def test_parameters_bitwise_equal_to_a_run_without_the_callback(tmp_path):
    held = (torch.randn(4, 6), torch.tensor([0, 1, 2, 0]))
    runs = []
    for name, callback in (("a", ProbeCallback(every=1, curvature=Curvature(
            held, every=2, loss=Tiny.loss, trace_samples=2))), ("b", None)):
        torch.manual_seed(0)
        model = Tiny(dropout=0.3)  # any draw from the global RNG would change training
        _fit(tmp_path / name, model, callback, _data(), accumulate_grad_batches=2)
        runs.append(model)
    for (name, p), q in zip(runs[0].named_parameters(), runs[1].parameters()):
        assert torch.equal(p, q), name
    _no_hooks(runs[0])


def test_bf16_mixed_precision_is_probed(tmp_path):
    callback = ProbeCallback(every=2, metrics=["act_mean", "preact_std"], weights=False)
    torch.manual_seed(0)
    _fit(tmp_path, Tiny(), callback, _data(), precision="bf16-mixed")
    table = callback.table()
    assert sorted(table.step.unique()) == [0, 2, 4, 5]  # and the last step
    assert table.value.map(math.isfinite).all()


def test_curvature_needs_a_loss():
    with pytest.raises(ValueError, match="curvature.loss"):
        ProbeCallback(curvature=Curvature((torch.zeros(1), torch.zeros(1))))
