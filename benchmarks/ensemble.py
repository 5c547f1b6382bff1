"""Ensemble engine vs a Python loop: 32 seeds of ResidualMLP(20, 80, 10), Adam, batch 256.

The engine is timed on both of its paths: the vmapped one (any architecture; the default)
and ResidualMLP's fused C++ kernels (:mod:`actlab.nn.residual_stack`, used when the native
kernels are enabled; built here on first use). The headline figures are those of the fused
path when it builds (``--no-native``: the vmapped path); both are printed.

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

from actlab.activations import native
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
    """The ensemble, trained a few steps at a time, on the vmapped or the fused path."""

    def __init__(self, models, args, fused: bool) -> None:
        self.trainer = EnsembleTrainer(Ensemble(models), F.mse_loss, FunctionalAdam(lr=1e-3))
        self.args, self.fused = args, fused
        x, y = next(batches(len(models), 1, args.batch, args.d))
        native.enable(fused)
        self.trainer.step(x, y)  # warm-up step (allocations, vmap set-up), not timed

    def run(self, steps: int, seed: int) -> float:
        """Wall time of ``steps`` steps."""
        data = list(batches(self.trainer.ensemble.num_seeds, steps, self.args.batch, self.args.d, seed))
        native.enable(self.fused)
        start = time.perf_counter()
        for x, y in data:
            self.trainer.step(x, y)
        elapsed = time.perf_counter() - start
        native.enable(False)
        return elapsed


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
    parser.add_argument("--no-native", action="store_true",
                        help="time only the vmapped path (no C++ build)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    models = [
        ResidualMLP(args.d, args.m, args.L, "relu", generator=torch.Generator().manual_seed(s))
        for s in range(args.seeds)
    ]
    x, y = next(batches(1, 1, args.batch, args.d))
    flops_per_step = count_step_flops(models[0], F.mse_loss, x[0], y[0]) * args.seeds

    paths = {"vmap": EnsembleRunner(models, args, fused=False)}
    if not args.no_native:
        if residual_stack_available():
            paths["fused"] = EnsembleRunner(models, args, fused=True)
        else:
            print(f"fused path unavailable ({native.build_error() or 'no BLAS symbols'}); "
                  "timing the vmapped path only")
    loop = LoopRunner(models, args, fused=False)
    loop_fused = LoopRunner(models, args, fused=True)
    # Rounds interleave the contenders so that load from other processes hits all alike.
    per_round = max(1, args.steps // args.rounds)
    t_path = dict.fromkeys(paths, 0.0)
    fractions: dict[str, list[float]] = {name: [] for name in paths}
    t_loop = t_fused = 0.0
    for r in tqdm(range(args.rounds), desc="rounds", disable=not sys.stderr.isatty()):
        peak = matmul_gflops(args.matmul_size, 5)
        for name, runner in paths.items():
            t = runner.run(per_round, seed=r + 1)
            fractions[name].append(flops_per_step * per_round / t / 1e9 / peak)
            t_path[name] += t
        t_loop += loop.run(per_round, seed=r + 1)
        t_fused += loop_fused.run(per_round, seed=r + 1)
    steps = per_round * args.rounds
    print(f"threads: {torch.get_num_threads()}, seeds {args.seeds}, steps {steps} in {args.rounds} "
          f"interleaved rounds, model ({args.d}, {args.m}, {args.L}), batch {args.batch}")
    print(f"FLOPs per member step (fwd+bwd): {flops_per_step / args.seeds / 1e6:.1f} M")
    print(f"loop, torch.optim.Adam default: {t_loop:.2f} s ({t_loop / steps * 1e3:.1f} ms/step); "
          f"with fused=True: {t_fused:.2f} s")
    figures: dict[str, dict[str, float]] = {}
    for name, t_ens in t_path.items():
        fraction = statistics.median(fractions[name])
        figures[name] = {
            "over_loop_speedup": round(t_loop / t_ens, 3),
            "over_fused_adam_loop_speedup": round(t_fused / t_ens, 3),
            "gflops": round(flops_per_step * steps / t_ens / 1e9, 2),
            "fraction_of_matmul": round(fraction, 4),
            "ms_per_step": round(t_ens / steps * 1e3, 2),
        }
        f = figures[name]
        print(f"ensemble, {name} path: {t_ens:.2f} s ({f['ms_per_step']:.1f} ms/step), speed-up "
              f"{f['over_loop_speedup']:.2f}x over the loop (goal >= 5x), "
              f"{f['over_fused_adam_loop_speedup']:.2f}x over the fused-Adam loop; "
              f"{f['gflops']:.1f} GFLOP/s = median {fraction:.1%} of the {args.matmul_size}^2 "
              f"matmul per round (range {min(fractions[name]):.1%}-{max(fractions[name]):.1%}; "
              "goal >= 35%)")
    headline = figures.get("fused", figures["vmap"])
    result = {f"ensemble_{key}": value for key, value in headline.items()}
    result["ensemble_path"] = "fused" if "fused" in figures else "vmap"
    result.update({f"vmap_ensemble_{key}": value for key, value in figures["vmap"].items()})
    print(json.dumps(result))


def residual_stack_available() -> bool:
    """Whether ResidualMLP's fused kernels build and load here."""
    from actlab.nn.residual_stack import extension

    native.enable(True)
    available = extension() is not None
    native.enable(False)
    return available


if __name__ == "__main__":
    main()
