"""Vmapped ensemble vs a Python loop: 32 seeds of ResidualMLP(20, 80, 10), Adam, batch 256.

Prints the ensemble's speed-up over a loop of the same models with ``torch.optim.Adam``
(same data, same steps), and the ensemble's achieved GFLOP/s (forward + backward FLOPs
counted by ``torch.utils.flop_counter``) as a fraction of the fp32 matmul throughput
measured in the same run (a square ``torch.mm`` of size ``--matmul-size``).

Goals from the issue: speed-up >= 5x, fraction of matmul throughput >= 35%. The last line
is one JSON object of the figures.

    python benchmarks/ensemble.py                 # the issue's setting
    python benchmarks/ensemble.py --steps 50      # a quick look
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F

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


def batches(seeds: int, steps: int, batch: int, d: int):
    """Deterministic (S, B, d) inputs and targets, generated step by step."""
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        yield torch.randn(seeds, batch, d, generator=g), torch.randn(seeds, batch, d, generator=g)


def run_ensemble(models, args) -> float:
    """Wall time of ``args.steps`` ensemble steps."""
    trainer = EnsembleTrainer(Ensemble(models), F.mse_loss, FunctionalAdam(lr=1e-3))
    x, y = next(batches(len(models), 1, args.batch, args.d))
    trainer.step(x, y)  # warm-up step (allocations, vmap set-up), not timed
    start = time.perf_counter()
    for x, y in batches(len(models), args.steps, args.batch, args.d):
        trainer.step(x, y)
    return time.perf_counter() - start


def run_loop(models, args) -> float:
    """Wall time of the same steps as a Python loop of models with ``torch.optim.Adam``."""
    import copy

    models = [copy.deepcopy(m) for m in models]
    opts = [torch.optim.Adam(m.parameters(), lr=1e-3) for m in models]
    x, y = next(batches(len(models), 1, args.batch, args.d))
    F.mse_loss(models[0](x[0]), y[0]).backward()  # warm-up
    opts[0].zero_grad()
    start = time.perf_counter()
    for x, y in batches(len(models), args.steps, args.batch, args.d):
        for s, (model, opt) in enumerate(zip(models, opts)):
            opt.zero_grad()
            F.mse_loss(model(x[s]), y[s]).backward()
            opt.step()
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
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    models = [
        ResidualMLP(args.d, args.m, args.L, "relu", generator=torch.Generator().manual_seed(s))
        for s in range(args.seeds)
    ]
    x, y = next(batches(1, 1, args.batch, args.d))
    flops_per_member_step = count_step_flops(models[0], F.mse_loss, x[0], y[0])
    total_flops = flops_per_member_step * args.seeds * args.steps

    peak_before = matmul_gflops(args.matmul_size, 10)
    t_ens = run_ensemble(models, args)
    t_loop = run_loop(models, args)
    peak_after = matmul_gflops(args.matmul_size, 10)
    peak = max(peak_before, peak_after)

    achieved = total_flops / t_ens / 1e9
    speedup = t_loop / t_ens
    fraction = achieved / peak
    print(f"threads: {torch.get_num_threads()}, seeds {args.seeds}, steps {args.steps}, "
          f"model ({args.d}, {args.m}, {args.L}), batch {args.batch}")
    print(f"FLOPs per member step (fwd+bwd): {flops_per_member_step / 1e6:.1f} M")
    print(f"ensemble: {t_ens:.2f} s   loop: {t_loop:.2f} s   speed-up: {speedup:.2f}x (goal >= 5x)")
    print(f"ensemble: {achieved:.1f} GFLOP/s   fp32 matmul {args.matmul_size}^2: {peak:.1f} GFLOP/s"
          f"   fraction: {fraction:.1%} (goal >= 35%)")
    print(json.dumps({
        "ensemble_over_loop_speedup": round(speedup, 3),
        "ensemble_gflops": round(achieved, 2),
        "matmul_gflops": round(peak, 2),
        "ensemble_fraction_of_matmul": round(fraction, 4),
    }))


if __name__ == "__main__":
    main()
