"""Ensemble steps with and without ``keep_freed_memory``: page faults and step time.

glibc returns large freed blocks to the kernel, so every training step of a vmapped
ensemble faults its activations' pages in again. ``actlab.train.allocator.keep_freed_memory``
keeps them in the heap. The setting is process-wide and cannot be undone, so each variant
runs in its own child process; the children alternate (``--pairs`` times) so that load from
other processes hits both alike. Prints the median step time of each variant, their ratio,
and minor page faults and system CPU time per step. The last line is one JSON object.

    python benchmarks/allocator.py              # 32 seeds of (20, 80, 10), batch 256
    python benchmarks/allocator.py --pairs 5
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time


def child(keep: bool, seeds: int, steps: int) -> None:
    """Train ``steps`` ensemble steps and print one JSON line of per-step figures."""
    import torch
    import torch.nn.functional as F

    from actlab.nn.residual_mlp import ResidualMLP
    from actlab.train.ensemble import Ensemble, EnsembleTrainer
    from actlab.train.functional_optim import FunctionalAdam

    models = [ResidualMLP(20, 80, 10, "relu", generator=torch.Generator().manual_seed(s))
              for s in range(seeds)]
    trainer = EnsembleTrainer(Ensemble(models), F.mse_loss, FunctionalAdam(lr=1e-3),
                              keep_freed_memory=keep)
    g = torch.Generator().manual_seed(0)
    data = [(torch.randn(seeds, 256, 20, generator=g), torch.randn(seeds, 256, 20, generator=g))
            for _ in range(steps + 3)]
    for x, y in data[:3]:  # warm-up
        trainer.step(x, y)
    before = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    for x, y in data[3:]:
        trainer.step(x, y)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({
        "ms_per_step": elapsed / steps * 1e3,
        "faults_per_step": (after.ru_minflt - before.ru_minflt) / steps,
        "sys_ms_per_step": (after.ru_stime - before.ru_stime) / steps * 1e3,
    }))


def run_child(keep: bool, args) -> dict:
    """One child process; its JSON figures."""
    cmd = [sys.executable, __file__, "--child", "on" if keep else "off",
           "--seeds", str(args.seeds), "--steps", str(args.steps)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    """Alternate the two variants and print their figures (last line JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=32)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--pairs", type=int, default=3, help="alternating child runs per variant")
    parser.add_argument("--child", choices=["on", "off"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child == "on", args.seeds, args.steps)
        return
    results: dict[bool, list[dict]] = {True: [], False: []}
    for i in range(args.pairs):
        for keep in ((True, False) if i % 2 else (False, True)):
            results[keep].append(run_child(keep, args))

    def median(keep: bool, key: str) -> float:
        return statistics.median(r[key] for r in results[keep])

    ratio = median(False, "ms_per_step") / median(True, "ms_per_step")
    print(f"{args.seeds} seeds of (20, 80, 10), batch 256, {args.steps} steps per child, "
          f"{args.pairs} children per variant (medians)")
    for keep, label in ((False, "glibc defaults"), (True, "keep_freed_memory")):
        print(f"  {label:<18s} {median(keep, 'ms_per_step'):6.1f} ms/step   "
              f"{median(keep, 'faults_per_step'):7.0f} page faults/step   "
              f"{median(keep, 'sys_ms_per_step'):5.2f} ms system time/step")
    print(f"step time, defaults over keep_freed_memory: {ratio:.3f}x")
    print(json.dumps({
        "defaults_over_keep_freed_memory_step_time": round(ratio, 3),
        "page_faults_per_step_defaults": round(median(False, "faults_per_step"), 1),
        "page_faults_per_step_keep_freed_memory": round(median(True, "faults_per_step"), 1),
    }))


if __name__ == "__main__":
    main()
