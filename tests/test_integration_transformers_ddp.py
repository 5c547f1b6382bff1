"""ProbeCallback in a real 2-process ``transformers.Trainer`` under DDP (gloo, CPU): rank 0's
table equals a single process probing the same model on the global batches, in float64."""

from __future__ import annotations

import os
import pickle
import socket
import sys

import pytest
import torch
import torch.multiprocessing as mp
from torch import nn

pytest.importorskip("transformers")
pytest.importorskip("accelerate")
pytestmark = [pytest.mark.skipif(not torch.distributed.is_available() or sys.platform == "win32",
                                 reason="needs torch.distributed with gloo"),
              pytest.mark.slow,
              pytest.mark.xdist_group("processes")]  # 2 ranks: one xdist worker runs these

WORLD, PER_RANK, STEPS, ROWS = 2, 3, 4, 24


class Tiny(nn.Module):
    """Linear -> GELU -> Linear classifier; records which rows each forward saw."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc1 = nn.Linear(6, 12)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(12, 3)
        self.double()
        self.seen: list[list[int]] = []

    def forward(self, x, labels=None, idx=None):
        if idx is not None and self.training:
            self.seen.append(idx.tolist())
        logits = self.fc2(self.act(self.fc1(x)))
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = nn.functional.cross_entropy(logits, labels)
        return out


def _rows() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    return (torch.randn(ROWS, 6, generator=g, dtype=torch.float64) * 1.5 + 0.3,
            torch.randint(0, 3, (ROWS,), generator=g))


class Rows(torch.utils.data.Dataset):
    def __init__(self) -> None:
        self.x, self.y = _rows()

    def __len__(self) -> int:
        return ROWS

    def __getitem__(self, i: int) -> dict:
        return {"x": self.x[i], "labels": self.y[i], "idx": torch.tensor(i)}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, port: int, out: str) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(WORLD),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    torch.set_num_threads(1)
    from transformers import Trainer, TrainingArguments

    from actlab.integrations.transformers import ProbeCallback

    args = TrainingArguments(output_dir=f"{out}.dir", per_device_train_batch_size=PER_RANK,
                             max_steps=STEPS, learning_rate=0.1, optim="sgd",
                             lr_scheduler_type="constant", max_grad_norm=0.0, weight_decay=0.0,
                             logging_steps=100, save_strategy="no", report_to=[], use_cpu=True,
                             ddp_backend="gloo", seed=0, disable_tqdm=True,
                             dataloader_num_workers=0, remove_unused_columns=False,
                             ddp_find_unused_parameters=False)
    model = Tiny()
    callback = ProbeCallback(every=1, weights=None)
    Trainer(model=model, args=args, train_dataset=Rows(), callbacks=[callback]).train()
    with open(f"{out}.{rank}", "wb") as fh:
        pickle.dump({"table": callback.table(), "seen": model.seen}, fh)
    torch.distributed.barrier()


def test_trainer_under_ddp_records_the_global_batch_on_every_rank(tmp_path) -> None:
    from actlab.probe import Probe

    out = str(tmp_path / "hf")
    mp.spawn(_worker, args=(_free_port(), out), nprocs=WORLD, join=True)
    ranks = []
    for rank in range(WORLD):
        with open(f"{out}.{rank}", "rb") as fh:
            ranks.append(pickle.load(fh))
    assert all(len(r["seen"]) == STEPS for r in ranks)
    # the single-process reference: the same model and SGD on each step's global batch
    x, y = _rows()
    model = Tiny()
    probe = Probe(model, every=1, weights=None)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(STEPS):
        rows = [i for r in ranks for i in r["seen"][step]]
        assert len(set(rows)) == WORLD * PER_RANK  # the ranks saw disjoint halves
        opt.zero_grad()
        nn.functional.cross_entropy(model(x[rows])["logits"], y[rows]).backward()
        opt.step()
        probe.step()
    want = probe.table().sort_values(["step", "layer", "metric"]).reset_index(drop=True)
    got = ranks[0]["table"].sort_values(["step", "layer", "metric"]).reset_index(drop=True)
    assert len(got) == len(want) > 0
    assert list(got["metric"]) == list(want["metric"]) and list(got["layer"]) == list(want["layer"])
    torch.testing.assert_close(torch.tensor(got["value"].to_numpy(dtype=float)),
                               torch.tensor(want["value"].to_numpy(dtype=float)),
                               rtol=1e-6, atol=1e-9, equal_nan=True)
