"""Vmapped ensemble vs a Python loop: 32 seeds of ResidualMLP(20, 80, 10), Adam, batch 256.

Prints the ensemble's speed-up over a loop of the same models with ``torch.optim.Adam``
(same data, same steps; the default for-loop Adam, and also ``fused=True``), and the
ensemble's achieved GFLOP/s (forward + backward FLOPs counted by
``torch.utils.flop_counter``) as a fraction of the fp32 matmul throughput measured in the
same run (a square ``torch.mm`` of size ``--matmul-size``). The contenders run in
interleaved rounds, and each round's ensemble throughput is divided by that round's matmul
throughput, so load from other processes does not favour either side.

Goals from the issue: speed-up >= 5x, fraction of matmul throughput >= 35%. The last line
is one JSON object of the figures.

    python benchmarks/ensemble.py                 # the issue's setting
    python benchmarks/ensemble.py --steps 50      # a quick look
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from tqdm import tqdm

from actlab.nn.residual_mlp import ResidualMLP
from actlab.train.ensemble import Ensemble, EnsembleTrainer, count_step_flops
from actlab.train.functional_optim import FunctionalAdam


def matmul_gflops(size: int, repeats: int) -> float:
    """Best-of-``repeats`` fp32 square-matmul throughput in GFLOP/s."""
    a = torch.randn(size, size)
    b = torch.randn(size, size)
    torch.mm(a, b)  # warm up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best / 1e9


def batches(seeds: int, steps: int, batch: int, d: int, seed: int = 0):
    """Deterministic (S, B, d) inputs and targets, generated step by step."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        yield torch.randn(seeds, batch, d, generator=g), torch.randn(seeds, batch, d, generator=g)


class EnsembleRunner:
    """The ensemble, trained a few steps at a time."""

    def __init__(self, models, args) -> None:
        self.trainer = EnsembleTrainer(Ensemble(models), F.mse_loss, FunctionalAdam(lr=1e-3))
        self.args = args
        x, y = next(batches(len(models), 1, args.batch, args.d))
        self.trainer.step(x, y)  # warm-up step (allocations, vmap set-up), not timed

    def run(self, steps: int, seed: int) -> float:
        """Wall time of ``steps`` steps."""
        data = list(batches(self.trainer.ensemble.num_seeds, steps, self.args.batch, self.args.d, seed))
        start = time.perf_counter()
        for x, y in data:
            self.trainer.step(x, y)
        return time.perf_counter() - start


class LoopRunner:
    """The same models one after another, each with its own ``torch.optim.Adam``."""

    def __init__(self, models, args, fused: bool) -> None:
        self.models = [copy.deepcopy(m) for m in models]
        self.opts = [torch.optim.Adam(m.parameters(), lr=1e-3, fused=fused) for m in self.models]
        self.args = args
        x, y = next(batches(len(models), 1, args.batch, args.d))
        self._step(x, y)  # warm-up

    def _step(self, x, y) -> None:
        for s, (model, opt) in enumerate(zip(self.models, self.opts)):
            opt.zero_grad()
            F.mse_loss(model(x[s]), y[s]).backward()
            opt.step()

    def run(self, steps: int, seed: int) -> float:
        """Wall time of ``steps`` steps of every model."""
        data = list(batches(len(self.models), steps, self.args.batch, self.args.d, seed))
        start = time.perf_counter()
        for x, y in data:
            self._step(x, y)
        return time.perf_counter() - start


def main() -> None:
    """Run the benchmark and print its figures (last line JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=32)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--d", type=int, default=20)
    parser.add_argument("--m", type=int, default=80)
    parser.add_argument("--L", type=int, default=10)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    parser.add_argument("--matmul-size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    models = [
        ResidualMLP(args.d, args.m, args.L, "relu", generator=torch.Generator().manual_seed(s))
        for s in range(args.seeds)
    ]
    x, y = next(batches(1, 1, args.batch, args.d))
    flops_per_step = count_step_flops(models[0], F.mse_loss, x[0], y[0]) * args.seeds

    ensemble = EnsembleRunner(models, args)
    loop = LoopRunner(models, args, fused=False)
    loop_fused = LoopRunner(models, args, fused=True)
    # Rounds interleave the contenders so that load from other processes hits all alike.
    per_round = max(1, args.steps // args.rounds)
    t_ens = t_loop = t_fused = 0.0
    fractions = []
    for r in tqdm(range(args.rounds), desc="rounds", disable=not sys.stderr.isatty()):
        peak = matmul_gflops(args.matmul_size, 5)
        t = ensemble.run(per_round, seed=r + 1)
        fractions.append(flops_per_step * per_round / t / 1e9 / peak)
        t_ens += t
        t_loop += loop.run(per_round, seed=r + 1)
        t_fused += loop_fused.run(per_round, seed=r + 1)
    steps = per_round * args.rounds
    achieved = flops_per_step * steps / t_ens / 1e9
    fraction = statistics.median(fractions)
    speedup, speedup_fused = t_loop / t_ens, t_fused / t_ens
    print(f"threads: {torch.get_num_threads()}, seeds {args.seeds}, steps {steps} in {args.rounds} "
          f"interleaved rounds, model ({args.d}, {args.m}, {args.L}), batch {args.batch}")
    print(f"FLOPs per member step (fwd+bwd): {flops_per_step / args.seeds / 1e6:.1f} M")
    print(f"ensemble: {t_ens:.2f} s ({t_ens / steps * 1e3:.1f} ms/step)   "
          f"loop (torch.optim.Adam default): {t_loop:.2f} s   speed-up: {speedup:.2f}x (goal >= 5x)")
    print(f"loop with torch.optim.Adam(fused=True): {t_fused:.2f} s   speed-up: {speedup_fused:.2f}x")
    print(f"ensemble: {achieved:.1f} GFLOP/s; per round as a fraction of the fp32 "
          f"{args.matmul_size}^2 matmul measured in that round: median {fraction:.1%} "
          f"(range {min(fractions):.1%}-{max(fractions):.1%}; goal >= 35%)")
    print(json.dumps({
        "ensemble_over_loop_speedup": round(speedup, 3),
        "ensemble_over_fused_adam_loop_speedup": round(speedup_fused, 3),
        "ensemble_gflops": round(achieved, 2),
        "ensemble_fraction_of_matmul": round(fraction, 4),
        "ensemble_ms_per_step": round(t_ens / steps * 1e3, 2),
    }))


if __name__ == "__main__":
    main()
