"""The sparsity mechanisms' cost on a GPU: Top-K forms and Percentile Centering, CUDA events.

The same paths `benchmarks/activations.py`, `benchmarks/topk_threshold.py` and
`benchmarks/percentile.py` time on the CPU, forward + backward, against the operation each
replaces, measured in the same run:

* activations on a ``(4096, 1024)`` batch against plain GELU: exact ``gelu:topk=0.1``, the
  frozen threshold ``gelu:topk=0.1:freeze_after=1`` (frozen after one training call), the
  Gaussian thresholds ``gelu:topk=0.1:gaussian`` and ``gelu:topk=0.1:gaussian_shift``, and
  ``gelu:adaptive``;
* Percentile Centering against ``nn.LayerNorm``: dynamic (statistics by selection) and
  frozen (Accumulation Stop) on ``(256, 1024)`` tokens (LayerNorm flavour) and on a
  ``(64, 64, 32, 32)`` map (BatchNorm flavour; LayerNorm over ``(C, H, W)``).

Each repeat times every candidate and its baseline once (``--inner`` calls each), the order
rotating, with :class:`actlab.train.timing.StepClock` (CUDA events on a GPU, the thread's
CPU time on the CPU); a ratio is the baseline's time over the candidate's, quoted as the
median and the 5-95 % range over repeats (keys ``*_p05`` / ``*_p95``). The last line is one
JSON object of the figures. ``--smoke`` runs tiny shapes on any device (a check of the
script, not a benchmark).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor, nn

import actlab
from actlab.nn.norms import PercentileBatchNorm, PercentileLayerNorm
from actlab.train.timing import StepClock

TOPK_SPECS = ("gelu:topk=0.1", "gelu:topk=0.1:freeze_after=1", "gelu:topk=0.1:gaussian",
              "gelu:topk=0.1:gaussian_shift", "gelu:adaptive")


def fwd_bwd(module: nn.Module, x: Tensor) -> Callable[[], None]:
    """One forward + backward of ``module`` on a fresh leaf copy of ``x``."""
    grad = torch.randn_like(x)

    def once() -> None:
        module(x.detach().requires_grad_(True)).backward(grad)
    return once


def interleaved(calls: dict[str, Callable[[], None]], device: torch.device, repeats: int,
                inner: int) -> dict[str, np.ndarray]:
    """Seconds per call of each entry and repeat, the entries alternating (order rotating)."""
    for once in calls.values():  # warm-up: kernels, caches, the frozen thresholds
        for _ in range(3):
            once()
    names = list(calls)
    order: list[str] = []
    clock = StepClock(device)
    clock.stamp()
    for r in range(repeats):
        for name in names[r % len(names):] + names[:r % len(names)]:
            for _ in range(inner):
                calls[name]()
            clock.stamp()
            order.append(name)
    seconds = np.asarray(clock.intervals()) / inner
    return {name: seconds[[i for i, n in enumerate(order) if n == name]] for name in names}


def ratio(base: np.ndarray, cand: np.ndarray, key: str, figures: dict[str, float]) -> str:
    """Store the median and 5-95 % range of ``base / cand`` under ``key``; a printable line."""
    p05, med, p95 = np.percentile(base / cand, [5, 50, 95])
    figures[key], figures[key + "_p05"], figures[key + "_p95"] = (float(med), float(p05),
                                                                   float(p95))
    return f"{key}: {med:.3f}x [{p05:.3f}-{p95:.3f}]"


def activation_figures(device: torch.device, shape: tuple[int, int], repeats: int, inner: int,
                       emit: Callable[[str], None]) -> dict[str, float]:
    """Plain GELU's time over each Top-K / adaptive form's (higher is faster)."""
    x = torch.randn(shape, device=device)
    modules = {"gelu": actlab.activation("gelu").to(device)}
    for spec in TOPK_SPECS:
        module = actlab.activation(spec).to(device)
        module(x)  # one training call: the frozen threshold freezes after it
        modules[spec] = module
    times = interleaved({k: fwd_bwd(m, x) for k, m in modules.items()}, device, repeats, inner)
    figures = {"gelu_ms": float(np.median(times["gelu"]) * 1e3)}
    for spec in TOPK_SPECS:
        emit(ratio(times["gelu"], times[spec], f"speed_vs_gelu[{spec}]", figures))
    return figures


def norm_figures(device: torch.device, shape: tuple[int, ...], repeats: int, inner: int,
                 emit: Callable[[str], None]) -> dict[str, float]:
    """LayerNorm's time over dynamic and frozen Percentile Centering's (higher is faster)."""
    x = torch.randn(shape, device=device)
    if len(shape) == 4:
        dynamic: nn.Module = PercentileBatchNorm(shape[1], q=0.7)
        frozen: nn.Module = PercentileBatchNorm(shape[1], q=0.7, freeze_after=1)
        layernorm: nn.Module = nn.LayerNorm(list(shape[1:]))
    else:
        dynamic = PercentileLayerNorm(shape[-1], q=0.7)
        frozen = PercentileLayerNorm(shape[-1], q=0.7, freeze_after=1)
        layernorm = nn.LayerNorm(shape[-1])
    modules = {"layernorm": layernorm, "dynamic": dynamic, "frozen": frozen}
    for module in modules.values():
        module.to(device)
    frozen(x)  # one warm-up step collects the statistics, then Accumulation Stop
    times = interleaved({k: fwd_bwd(m, x) for k, m in modules.items()}, device, repeats, inner)
    label = "x".join(map(str, shape))
    figures = {f"layernorm_ms_{label}": float(np.median(times["layernorm"]) * 1e3)}
    for name in ("dynamic", "frozen"):
        emit(ratio(times["layernorm"], times[name], f"{name}_speed_vs_layernorm_{label}",
                   figures))
    return figures


def main() -> None:
    """Run the benchmark; the last line is one JSON object of the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--inner", type=int, default=5)
    parser.add_argument("--smoke", action="store_true",
                        help="tiny shapes on any device: checks the script, measures nothing")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda: no CUDA GPU here (use --smoke --device cpu to check the "
              "script)", file=sys.stderr)
        sys.exit(2)
    if device.type == "cpu":
        torch.set_num_threads(1)  # StepClock reads this thread's CPU time
    torch.backends.cuda.matmul.allow_tf32 = False
    repeats, inner = (3, 1) if args.smoke else (args.repeats, args.inner)
    act_shape, token_shape, map_shape = (((64, 32), (16, 32), (4, 4, 4, 4)) if args.smoke else
                                         ((4096, 1024), (256, 1024), (64, 64, 32, 32)))
    print(f"torch {torch.__version__} on {device}, {StepClock(device).kind}, median of "
          f"{repeats} x {inner}", flush=True)
    figures: dict[str, float] = {}
    figures.update(activation_figures(device, act_shape, repeats, inner, print))
    for shape in (token_shape, map_shape):
        figures.update(norm_figures(device, shape, repeats, inner, print))
    print(json.dumps({k: round(v, 4) for k, v in figures.items()}))


if __name__ == "__main__":
    main()
