"""Probe overhead: training-step time with ``actlab.Probe`` divided by the time without it.

Two models, both trained with Adam on random data: a 12-block residual MLP
(``x + W2 act(W1 LN(x))``) and a small GPT-style decoder (pre-LN attention + GELU MLP).
Three conditions share one initialisation and the same batches: no probe, the probe with its
default metrics recording every 10 steps, and every step. The conditions are timed in
interleaved rounds of 10 steps (so each "every 10" round holds exactly one recorded step),
and the figure is the median round time of a condition over the median without the probe.

A third measurement runs a ``transformers.Trainer`` on the small GPT with
``actlab.integrations.transformers.ProbeCallback`` (every 10 steps / every step) against the
same Trainer run without it: whole ``trainer.train()`` calls of the same steps on the same
batches, interleaved over rounds, median over median (skipped if transformers/accelerate are
missing).

Two more measurements train ``actlab.nn.gpt.GPT`` at a small shape (2 layers, width 128,
context 64, batch 16): compiled with ``torch.compile`` (CPU inductor), and in a 2-process
DDP run (gloo, one thread each; the figure is the mean of the ranks' ratios). Beside the
probe (every 10 steps / every step) they time, in the same interleaved rounds and at the
same intervals, the peers a user would otherwise reach for (benchmarks/overhead_peers.py):
``wandb.watch(model, log="all", log_freq=10 / 1)`` in an offline run (skipped if wandb
cannot import) and forward hooks reading, per activation with ``.item()``, mean, negative
share and sparsity (``items``) or the probe's eight forward statistics (``items8``). Every condition warms up (compiles) on 10 steps before timing, and the
time to read the probe's table is added to its rounds. ``--smoke`` runs them at a tiny
shape, one round, dynamo's ``eager`` backend: a check that everything runs (< 30 s), not a
measurement.

Goals: <= 1.05x recording every 10 steps, <= 1.25x recording every step.
On CPU the clock is the process's CPU time (robust to other processes sharing the cores;
run with ``--threads 1`` so CPU time equals busy time), on GPU wall time after a
synchronise. Timings on a shared machine are still noisy; the interleaving keeps them fair.

    python benchmarks/probe_overhead.py [--rounds 15] [--threads 1] [--device cpu] [--quick]
                                        [--only resmlp,gpt,trainer,compiled,ddp] [--smoke]
                                        [--backend inductor]

The last line printed is a JSON object of the ratios.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

import actlab


class ResidualBlock(nn.Module):
    """Pre-LN residual MLP block."""

    def __init__(self, d: int, hidden: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(self.act(self.fc1(self.norm(x))))


class ResidualMLP(nn.Module):
    """12 residual MLP blocks between a linear input and output layer."""

    def __init__(self, d_in: int = 64, d: int = 256, hidden: int = 1024, depth: int = 12,
                 d_out: int = 10) -> None:
        super().__init__()
        self.inp = nn.Linear(d_in, d)
        self.blocks = nn.ModuleList(ResidualBlock(d, hidden) for _ in range(depth))
        self.out = nn.Linear(d, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for block in self.blocks:
            h = block(h)
        return self.out(h)


class GPTBlock(nn.Module):
    """Pre-LN causal self-attention + GELU MLP, nanoGPT style."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.up = nn.Linear(d, 4 * d)
        self.act = nn.GELU()
        self.down = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.down(self.act(self.up(self.ln2(x))))


class GPT(nn.Module):
    """A small GPT: token + position embeddings, blocks, final LN, tied head."""

    def __init__(self, vocab: int = 512, ctx: int = 64, d: int = 256, heads: int = 4,
                 layers: int = 4) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(GPTBlock(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        h = self.tok(idx) + self.pos(pos)
        for block in self.blocks:
            h = block(h)
        return self.ln(h) @ self.tok.weight.T


def make_task(name: str, device: torch.device, quick: bool) -> tuple[nn.Module, Callable]:
    """Model and a ``batch(step) -> loss_fn`` closure with fixed, seeded batches."""
    torch.manual_seed(0)
    gen = torch.Generator(device="cpu").manual_seed(1)
    if name == "resmlp":
        model = ResidualMLP(hidden=512 if quick else 1024)
        batch = 128 if quick else 256
        xs = torch.randn(8, batch, 64, generator=gen).to(device)
        ys = torch.randint(0, 10, (8, batch), generator=gen).to(device)

        def loss(m: nn.Module, step: int) -> torch.Tensor:
            return F.cross_entropy(m(xs[step % 8]), ys[step % 8])
    else:
        model = GPT(layers=2 if quick else 4)
        seqs = torch.randint(0, 512, (8, 8 if quick else 16, 65), generator=gen).to(device)

        def loss(m: nn.Module, step: int) -> torch.Tensor:
            s = seqs[step % 8]
            logits = m(s[:, :-1])
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), s[:, 1:].reshape(-1))
    return model.to(device), loss


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def measure(name: str, device: torch.device, rounds: int, quick: bool) -> dict[str, float]:
    """Median 10-step round time for each condition and the ratios to the plain run."""
    base, loss_fn = make_task(name, device, quick)
    conditions: dict[str, tuple[nn.Module, torch.optim.Optimizer, actlab.Probe | None]] = {}
    for cond, every in (("plain", None), ("every10", 10), ("every1", 1)):
        model = copy.deepcopy(base)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        probe = None
        if every is not None:
            blocks = list(model.blocks)
            probe = actlab.Probe(model, every=every, blocks=blocks)
        conditions[cond] = (model, opt, probe)
    steps = {cond: 0 for cond in conditions}

    # On CPU the clock is this process's CPU time: other processes sharing the cores inflate
    # wall time at random, CPU time much less. On GPU it is wall time after a synchronise.
    clock = time.process_time if device.type == "cpu" else time.perf_counter

    def run(cond: str, n: int) -> float:
        model, opt, probe = conditions[cond]
        sync(device)
        start = clock()
        for _ in range(n):
            loss_fn(model, steps[cond]).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if probe is not None:
                probe.step()
            steps[cond] += 1
        sync(device)
        return clock() - start

    for cond in conditions:  # warm-up: allocator, kernels, first recorded step
        run(cond, 10)
    times: dict[str, list[float]] = {cond: [] for cond in conditions}
    for r in range(rounds):
        order = list(conditions) if r % 2 == 0 else list(reversed(conditions))
        for cond in order:
            times[cond].append(run(cond, 10))
    # reading the table (the only host transfer) is part of the probe's cost: report it
    rows = {}
    for cond, (_, _, probe) in conditions.items():
        if probe is not None:
            start = time.perf_counter()
            rows[cond] = len(probe.table())
            times[cond + "_read_s"] = [time.perf_counter() - start]
            probe.close()
    plain = statistics.median(times["plain"])
    out = {
        "plain_step_ms": 1000 * plain / 10,
        "every10_over_plain": statistics.median(times["every10"]) / plain,
        "every1_over_plain": statistics.median(times["every1"]) / plain,
        "rows_every1": rows["every1"],
        "table_read_s_every1": times["every1_read_s"][0],
    }
    return out


class LMForTrainer(nn.Module):
    """The GPT with the ``forward(input_ids, labels) -> {"loss": ...}`` a Trainer expects."""

    def __init__(self, gpt: GPT) -> None:
        super().__init__()
        self.gpt = gpt

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        logits = self.gpt(input_ids)
        return {"loss": F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))}


class _Sequences(torch.utils.data.Dataset):
    def __init__(self, seqs: torch.Tensor) -> None:
        self.seqs = seqs

    def __len__(self) -> int:
        return len(self.seqs)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.seqs[i, :-1], "labels": self.seqs[i, 1:]}


def measure_trainer(device: torch.device, rounds: int, quick: bool) -> dict[str, float] | None:
    """Median ``trainer.train()`` time with ProbeCallback over the same run without it."""
    try:
        from transformers import Trainer, TrainingArguments

        from actlab.integrations.transformers import ProbeCallback
    except ImportError as err:
        print(f"trainer: skipped ({err})")
        return None
    import contextlib
    import io
    import tempfile

    torch.manual_seed(0)
    base = LMForTrainer(GPT(layers=2 if quick else 4))
    steps, batch = (20, 8) if quick else (40, 16)
    gen = torch.Generator().manual_seed(1)
    data = _Sequences(torch.randint(0, 512, (steps * batch, 65), generator=gen))
    clock = time.process_time if device.type == "cpu" else time.perf_counter
    tmp = tempfile.mkdtemp(prefix="probe_overhead_")

    def run(every: int | None) -> float:
        args = TrainingArguments(output_dir=tmp, per_device_train_batch_size=batch,
                                 max_steps=steps, learning_rate=1e-3, logging_steps=steps,
                                 save_strategy="no", report_to=[], seed=0, disable_tqdm=True,
                                 use_cpu=device.type == "cpu", dataloader_num_workers=0)
        callbacks = None if every is None else [ProbeCallback(every=every)]
        trainer = Trainer(model=copy.deepcopy(base).to(device), args=args, train_dataset=data,
                          callbacks=callbacks)
        with contextlib.redirect_stdout(io.StringIO()):  # the Trainer prints each log
            sync(device)
            start = clock()
            trainer.train()
            sync(device)
        return clock() - start

    conditions = {"plain": None, "every10": 10, "every1": 1}
    run(None)  # warm-up
    times: dict[str, list[float]] = {cond: [] for cond in conditions}
    for r in range(rounds):
        order = list(conditions) if r % 2 == 0 else list(reversed(conditions))
        for cond in order:
            times[cond].append(run(conditions[cond]))
    plain = statistics.median(times["plain"])
    return {"plain_run_s": plain, "steps": steps,
            "every10_over_plain": statistics.median(times["every10"]) / plain,
            "every1_over_plain": statistics.median(times["every1"]) / plain}


# ----------------------------------------------------------------------------- compiled, DDP
# Conditions of the compiled and distributed runs: the bare model, the probe and its peers
# (benchmarks/overhead_peers.py), each recording every 10 steps and every step.
PEERS = ("probe", "items", "items8", "wandb")
MEASUREMENTS = ("resmlp", "gpt", "trainer", "compiled", "ddp")


def small_gpt(smoke: bool) -> tuple[nn.Module, Callable]:
    """``actlab.nn.gpt.GPT`` at a small shape and a ``loss(model, step)`` on seeded batches."""
    from actlab.nn.gpt import GPT as ActlabGPT
    from actlab.nn.gpt import GPTConfig

    config = GPTConfig(vocab_size=256, block_size=32 if smoke else 64, n_layer=1 if smoke else 2,
                       n_head=2 if smoke else 4, n_embd=32 if smoke else 128)
    model = ActlabGPT(config, seed=0)
    gen = torch.Generator().manual_seed(1)
    seqs = torch.randint(0, 256, (8, 4 if smoke else 16, config.block_size + 1), generator=gen)

    def loss(m: nn.Module, step: int) -> torch.Tensor:
        s = seqs[step % 8]
        return m(s[:, :-1], s[:, 1:])[1]
    return model, loss


def make_conditions(base: nn.Module, wrap: Callable[[nn.Module], nn.Module],
                    peers: tuple[str, ...]) -> dict[str, tuple[nn.Module, torch.optim.Optimizer,
                                                                 object]]:
    """Per condition: its own copy of ``base`` (wrapped: compiled or DDP), Adam, the recorder."""
    from overhead_peers import ItemHooks, Plain, ProbeCondition, wandb_condition

    def build(kind: str, every: int) -> tuple[nn.Module, object] | None:
        model = wrap(copy.deepcopy(base))
        if kind == "plain":
            return model, Plain()
        if kind == "probe":
            return model, ProbeCondition(model, every, blocks=["blocks.0"])
        if kind in ("items", "items8"):
            return model, ItemHooks(model, every, full=kind == "items8")
        made = wandb_condition(model, every)
        return None if made is None else (model, made)

    out = {}
    for kind, every in [("plain", 0)] + [(k, e) for k in peers for e in (10, 1)]:
        built = build(kind, every)
        if built is not None:
            model, recorder = built
            name = kind if kind == "plain" else f"{kind}_every{every}"
            out[name] = (model, torch.optim.Adam(model.parameters(), lr=1e-3), recorder)
    return out


def time_conditions(conditions: dict, loss_fn: Callable, rounds: int) -> dict[str, float]:
    """Median 10-step round time (process CPU time) of each condition over the plain one."""
    steps = dict.fromkeys(conditions, 0)

    def run(cond: str, n: int) -> float:
        model, opt, recorder = conditions[cond]
        start = time.process_time()
        for _ in range(n):
            loss_fn(model, steps[cond]).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            recorder.after_step()
            steps[cond] += 1
        return time.process_time() - start

    for cond in conditions:  # warm-up: compiles, and runs recorded and unrecorded steps
        run(cond, 10)
    times: dict[str, list[float]] = {cond: [] for cond in conditions}
    for r in range(rounds):
        for cond in (list(conditions) if r % 2 == 0 else list(reversed(conditions))):
            times[cond].append(run(cond, 10))
    for cond, (_, _, recorder) in conditions.items():
        start = time.process_time()
        recorder.close()  # reading the probe's table belongs to its cost: add it per round
        times[cond] = [t + (time.process_time() - start) / rounds for t in times[cond]]
    plain = statistics.median(times["plain"])
    return {cond: statistics.median(t) / plain for cond, t in times.items() if cond != "plain"} | {
        "plain_step_ms": 1000 * plain / 10}


def measure_compiled(rounds: int, smoke: bool, backend: str) -> dict[str, float]:
    """The small actlab GPT under ``torch.compile`` (CPU) for every condition."""
    import warnings

    base, loss_fn = small_gpt(smoke)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        conditions = make_conditions(base, lambda m: torch.compile(m, backend=backend), PEERS)
        return time_conditions(conditions, loss_fn, rounds)


def _ddp_worker(rank: int, world: int, port: int, rounds: int, smoke: bool, out_dir: str) -> None:
    import os

    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        base, loss_fn = small_gpt(smoke)
        ddp = torch.nn.parallel.DistributedDataParallel
        conditions = make_conditions(base, ddp, PEERS)
        res = time_conditions(conditions, loss_fn, rounds)
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
            json.dump(res, f)
    finally:
        dist.destroy_process_group()


def measure_ddp(rounds: int, smoke: bool, world: int = 2) -> dict[str, float]:
    """The small actlab GPT under DDP (gloo, ``world`` CPU processes); the mean over ranks."""
    import os
    import socket
    import tempfile

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out_dir = tempfile.mkdtemp(prefix="probe_overhead_ddp_")
    torch.multiprocessing.spawn(_ddp_worker, args=(world, port, rounds, smoke, out_dir),
                                nprocs=world)
    ranks = []
    for rank in range(world):
        with open(os.path.join(out_dir, f"rank{rank}.json")) as f:
            ranks.append(json.load(f))
    return {k: statistics.mean(r[k] for r in ranks) for k in ranks[0]}


def report(name: str, res: dict[str, float], figures: dict[str, float]) -> None:
    """Print one line per condition (against its goal) and add the ratios to ``figures``."""
    print(f"{name}: plain step {res['plain_step_ms']:.2f} ms")
    for cond in sorted(k for k in res if k != "plain_step_ms"):
        goal = 1.05 if cond.endswith("every10") else 1.25
        note = f" (goal <= {goal})" if cond.startswith("probe") else ""
        print(f"  {cond:16s} {res[cond]:.3f}x{note}")
        figures[f"{name}_{cond}_over_plain"] = round(res[cond], 4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--quick", action="store_true", help="smaller models, 5 rounds")
    parser.add_argument("--only", default=",".join(MEASUREMENTS),
                        help=f"comma list of measurements: {', '.join(MEASUREMENTS)}")
    parser.add_argument("--smoke", action="store_true",
                        help="seconds, not minutes: tiny compiled (dynamo's eager backend) and "
                             "DDP runs with every peer, 1 round; the figures mean nothing")
    parser.add_argument("--backend", default="inductor", help="torch.compile backend")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    rounds = 1 if args.smoke else 5 if args.quick else args.rounds
    only = [o.strip() for o in args.only.split(",") if o.strip()]
    if args.smoke:
        only = [o for o in only if o in ("compiled", "ddp")]
    unknown = sorted(set(only) - set(MEASUREMENTS))
    if unknown:
        parser.error(f"--only: unknown {', '.join(unknown)}; choose from {', '.join(MEASUREMENTS)}")
    figures: dict[str, float] = {}
    for name in (n for n in ("resmlp", "gpt") if n in only):
        res = measure(name, device, rounds, args.quick)
        print(f"{name:7s} plain step {res['plain_step_ms']:7.2f} ms | probe every 10 steps: "
              f"{res['every10_over_plain']:.3f}x (goal <= 1.05) | every step: "
              f"{res['every1_over_plain']:.3f}x (goal <= 1.25) | reading {res['rows_every1']} "
              f"rows took {res['table_read_s_every1']:.2f} s")
        figures[f"{name}_every10_over_plain"] = round(res["every10_over_plain"], 4)
        figures[f"{name}_every1_over_plain"] = round(res["every1_over_plain"], 4)
    res = measure_trainer(device, rounds, args.quick) if "trainer" in only else None
    if res is not None:
        print(f"trainer plain run {res['plain_run_s']:6.2f} s ({res['steps']} steps) | "
              f"ProbeCallback every 10 steps: {res['every10_over_plain']:.3f}x (goal <= 1.05) | "
              f"every step: {res['every1_over_plain']:.3f}x (goal <= 1.25)")
        figures["trainer_every10_over_plain"] = round(res["every10_over_plain"], 4)
        figures["trainer_every1_over_plain"] = round(res["every1_over_plain"], 4)
    if "compiled" in only:
        backend = "eager" if args.smoke else args.backend
        print(f"torch.compile backend: {backend}")
        report("compiled", measure_compiled(rounds, args.smoke, backend), figures)
    if "ddp" in only:
        report("ddp", measure_ddp(rounds, args.smoke), figures)
    assert all(math.isfinite(v) for v in figures.values())
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
