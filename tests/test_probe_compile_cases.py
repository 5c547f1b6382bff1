"""The compiled probe records what the eager probe records, whoever compiled the model and when.

Each case is tried as a user would meet it and compared row by row with the same run in
eager mode: another instance of the model's class compiled earlier in the process (with
``actlab.Probe(torch.compile(model))``, and with that other instance called between the
steps), the probe created before the model is compiled, and the Hugging Face Trainer with
``TrainingArguments(torch_compile=True)``, compiling for the first time and again with a warm
cache. dynamo's ``aot_eager`` backend runs dynamo and AOTAutograd (what decides which hooks
a graph holds) without inductor's code generation, which takes minutes on two cores; the
inductor run, graph counts included, is in ``tests/test_probe_compile.py``.
"""

from __future__ import annotations

import contextlib
import copy
import io
import warnings

import pandas as pd
import pytest
import torch
from torch import nn

import actlab

STEPS, EVERY = 7, 3
KEY = ["step", "layer", "metric"]


class Net(nn.Module):
    """Two Linear -> activation stages and a head (a class of its own, so that no other test
    compiles it)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(5, 12)
        self.act1 = nn.GELU()
        self.fc2 = nn.Linear(12, 12)
        self.act2 = actlab.activation("silu")
        self.head = nn.Linear(12, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.act2(self.fc2(self.act1(self.fc1(x)))))


def _batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(3)
    return [(torch.randn(9, 5, generator=gen, dtype=torch.float64),
             torch.randn(9, 2, generator=gen, dtype=torch.float64)) for _ in range(STEPS)]


def _train(model: nn.Module, probe_on: nn.Module | None = None, between=None) -> pd.DataFrame:
    """SGD steps recording every 3rd; ``probe_on``: the module given to the probe (default
    ``model``); ``between()`` runs after each step."""
    probe = actlab.Probe(probe_on if probe_on is not None else model, every=EVERY,
                         blocks=["fc2"])
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for x, y in _batches():
        ((model(x) - y) ** 2).mean().backward()
        opt.step()
        opt.zero_grad()
        probe.step()
        if between is not None:
            between()
    table = probe.table()
    probe.close()
    return table


def _assert_same(got: pd.DataFrame, want: pd.DataFrame) -> None:
    merged = want.merge(got, on=KEY, how="outer", suffixes=("_want", "_got"), indicator=True)
    missing = merged[merged["_merge"] != "both"]
    assert missing.empty, f"{len(missing)} of {len(want)} rows differ:\n{missing.head(12)}"
    assert merged.value_got.tolist() == pytest.approx(merged.value_want.tolist(), rel=1e-9,
                                                      abs=1e-12)


@pytest.fixture(scope="module")
def base() -> Net:
    torch.manual_seed(0)
    return Net().double()


@pytest.fixture(scope="module")
def eager(base: Net) -> pd.DataFrame:
    table = _train(copy.deepcopy(base))
    # activation, gradient and weight rows at every recorded step
    assert sorted(set(table.step)) == list(range(0, STEPS + 1, EVERY))
    assert {"act1", "act2", "fc2"} <= set(table[table.step == 0].layer)
    return table


def test_another_instance_compiled_earlier(base: Net, eager: pd.DataFrame) -> None:
    other = torch.compile(copy.deepcopy(base), backend="aot_eager")
    x = _batches()[0][0]
    other(x).sum().backward()  # dynamo now holds a graph of Net without any hook
    model = torch.compile(copy.deepcopy(base), backend="aot_eager")
    _assert_same(_train(model), eager)
    # the other instance keeps running between the steps: neither takes the other's graph
    model = torch.compile(copy.deepcopy(base), backend="aot_eager")
    calls = []

    def run_other() -> None:
        calls.append(other(x).detach())

    _assert_same(_train(model, between=run_other), eager)
    assert all(torch.equal(c, calls[0]) for c in calls)  # the other's weights never moved


def test_probe_created_before_the_model_is_compiled(base: Net, eager: pd.DataFrame) -> None:
    """Also: one graph for recorded and unrecorded steps, no recompile, no graph break."""
    from torch._dynamo.utils import counters

    net = copy.deepcopy(base)
    model = torch.compile(net, backend="aot_eager")
    counters.clear()
    _assert_same(_train(model, probe_on=net), eager)
    # compiled once (or not at all: a graph traced for another probed instance of the class,
    # whose hooks it reaches through the module, serves this one too), never again
    assert counters["frames"]["total"] <= 1
    assert counters["stats"]["unique_graphs"] <= 1
    assert dict(counters["graph_break"]) == {}


def test_hooks_that_cannot_run_in_a_graph_are_named_once_compiled(base: Net) -> None:
    """The probe on the inner model cannot know it will run compiled: the first step after a
    compiled call names the output-gradient metrics its compiled passes leave out."""
    net = copy.deepcopy(base)
    model = torch.compile(net, backend="aot_eager")
    probe = actlab.Probe(net, metrics=["act_mean", "act_grad_rms"])
    x, y = _batches()[0]
    ((model(x) - y) ** 2).mean().backward()
    with pytest.warns(UserWarning, match=r"torch.compile.*act_grad_rms"):
        probe.step()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        probe.step()  # said once
    table = probe.table()
    probe.close()
    assert set(table.metric) == {"act_mean"}


# ----------------------------------------------------------------------------- HF Trainer
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")


class _Sequences(torch.utils.data.Dataset):
    def __init__(self, seqs: torch.Tensor) -> None:
        self.seqs = seqs

    def __len__(self) -> int:
        return len(self.seqs)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.seqs[i], "labels": self.seqs[i]}


def _trainer_table(tmp_path, compile_: bool) -> pd.DataFrame:
    """A tiny GPT-2 (built from a config) trained 7 steps by the Trainer with ProbeCallback."""
    from actlab.integrations.transformers import ProbeCallback

    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=32, n_positions=8, n_embd=16, n_layer=2,
                                     n_head=2, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(config).double()
    data = _Sequences(torch.randint(0, 32, (28, 8), generator=torch.Generator().manual_seed(1)))
    extra = {"torch_compile": True, "torch_compile_backend": "aot_eager"} if compile_ else {}
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=4, max_steps=STEPS,
        learning_rate=1e-3, logging_steps=100, save_strategy="no", report_to=[], use_cpu=True,
        seed=0, disable_tqdm=True, dataloader_num_workers=0, **extra)
    callback = ProbeCallback(every=EVERY)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data,
                                   callbacks=[callback])
    with contextlib.redirect_stdout(io.StringIO()):
        trainer.train()
    return callback.table()


@pytest.mark.slow
def test_hf_trainer_torch_compile_first_and_warm_cache(tmp_path) -> None:
    want = _trainer_table(tmp_path / "eager", compile_=False)
    # steps 0, 3 and 6 (also the run's last): every site, block and weight row each time
    assert sorted(set(want.step)) == [0, 3, 6]
    rows = want.groupby("step").size()
    assert rows.nunique() == 1, rows
    for run in ("first", "warm"):  # the second run finds the first run's graphs in dynamo
        _assert_same(_trainer_table(tmp_path / run, compile_=True), want)
