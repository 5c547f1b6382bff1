"""Forward+backward cost of activation options relative to the plain activation.

Times ``y = act(x); y.backward(g)`` on a (4096, 1024) float32 tensor in eager mode for
``relu:shift=theory``, ``gelu:adaptive``, ``gelu:topk=0.1``, its frozen threshold
(``gelu:topk=0.1:freeze_after=1``, frozen by the warm-up calls), its Gaussian thresholds
(``gelu:topk=0.1:gaussian``, ``gelu:topk=0.1:gaussian_shift``) and ``sugar``, each against
its plain activation measured in the same run, the two interleaved so that load from other
processes hits both alike. Times are the thread's CPU time (``time.thread_time``), which
waiting for a shared core does not inflate. Reports median ratios.

Goals: fixed shift <= 1.10x, adaptive <= 1.5x, Top-K (``gelu:topk=0.1``) <= 2x, frozen
Top-K <= 1.15x, Gaussian Top-K <= 1.6x.

Each pair is measured twice: with the default ATen path, and with the opt-in one-pass C++
kernels of ``actlab.activations.native`` (built on first use, ~40 s once; skipped with a
note if they cannot be built, or with ``--no-native``); for Top-K these are the selection
kernels (``csrc/selection.cpp``: select the k-th largest per row and mask, one pass back). The plain activation is the same
ATen kernel in both.

Runs on one thread by default: these elementwise kernels are memory-bound, and on a machine
whose cores are shared with other work, multi-threaded timings mostly measure threads
waiting for each other. ``--threads 0`` uses torch's default instead.

Usage: python benchmarks/activations.py [--repeats 30] [--threads N]
The last line printed is one JSON object of the ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

import actlab
from actlab.activations import native

PAIRS = [
    ("relu:shift=theory", "relu", "relu_shift_theory_over_relu"),
    ("gelu:adaptive", "gelu", "gelu_adaptive_over_gelu"),
    ("gelu:topk=0.1", "gelu", "gelu_topk_over_gelu"),
    ("gelu:topk=0.1:freeze_after=1", "gelu", "gelu_topk_frozen_over_gelu"),
    ("gelu:topk=0.1:gaussian", "gelu", "gelu_topk_gaussian_over_gelu"),
    ("gelu:topk=0.1:gaussian_shift", "gelu", "gelu_topk_gaussian_shift_over_gelu"),
    ("sugar", "relu", "sugar_over_relu"),
]


def _step(module: torch.nn.Module, x: torch.Tensor, grad: torch.Tensor) -> float:
    x.grad = None
    start = time.thread_time()
    y = module(x)
    y.backward(grad)
    return time.thread_time() - start


def measure(variant: str, plain: str, x: torch.Tensor, grad: torch.Tensor,
            repeats: int) -> tuple[float, float, float]:
    """Median seconds of variant and plain, and the median of per-round ratios."""
    var_mod, plain_mod = actlab.activation(variant), actlab.activation(plain)
    for _ in range(3):  # warm-up
        _step(var_mod, x, grad)
        _step(plain_mod, x, grad)
    var_t, plain_t, ratios = [], [], []
    for i in range(repeats):
        if i % 2:  # alternate the order within a round
            a = _step(var_mod, x, grad)
            b = _step(plain_mod, x, grad)
        else:
            b = _step(plain_mod, x, grad)
            a = _step(var_mod, x, grad)
        var_t.append(a)
        plain_t.append(b)
        ratios.append(a / b)
    return statistics.median(var_t), statistics.median(plain_t), statistics.median(ratios)


def main() -> None:
    """Run the benchmark and print the ratios, the last line as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: torch default)")
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--cols", type=int, default=1024)
    parser.add_argument("--no-native", action="store_true", help="skip the C++ kernel path")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(args.rows, args.cols, generator=gen).requires_grad_(True)
    grad = torch.randn(args.rows, args.cols, generator=gen)
    print(f"forward+backward on ({args.rows}, {args.cols}) float32, eager, "
          f"{torch.get_num_threads()} threads, {args.repeats} interleaved repeats")
    figures = {}
    paths = [("aten", "")]
    if not args.no_native:
        if native.enable():
            paths.append(("native", "_native"))
        else:
            print(f"native kernels unavailable: {native.build_error()}")
    for path, suffix in paths:
        native.enable(path == "native")
        print(f"{path} path:")
        for variant, plain, key in PAIRS:
            t_var, t_plain, ratio = measure(variant, plain, x, grad, args.repeats)
            figures[key + suffix] = round(ratio, 3)
            print(f"  {variant:<20s} {t_var * 1e3:8.2f} ms   {plain:<6s} {t_plain * 1e3:8.2f} ms"
                  f"   ratio {ratio:.3f}")
    native.enable(False)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
