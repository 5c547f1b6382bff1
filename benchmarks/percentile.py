"""Percentile Centering speed: selection vs torch.quantile vs LayerNorm, and Accumulation Stop.

Times forward + backward (input and parameter gradients) of

* ``dynamic``: Percentile Centering with statistics computed by selection (linear time);
* ``quantile``: the same layer with the percentile from ``torch.quantile`` (a full sort);
* ``frozen``: the layer after Accumulation Stop (running statistics, nothing computed);
* ``layernorm``: PyTorch's fused ``nn.LayerNorm`` (the baseline), and on the 4-d shape
  also ``nn.BatchNorm2d`` for reference;

on a ``(256, 1024)`` token batch (LayerNorm flavour, statistics per row) and a
``(64, 64, 32, 32)`` feature map (BatchNorm flavour, statistics per channel; LayerNorm
baseline over ``(C, H, W)``). Goals: dynamic at least 2x faster than the quantile version
and at least 0.25x LayerNorm's speed; frozen at least as fast as LayerNorm (ratio >= 1.0). Prints the ratios and, last, one JSON
line of figures.

By default it runs on one thread and measures that thread's CPU time
(``time.thread_time``), which other processes on a shared machine barely disturb;
``--clock wall`` measures wall time instead. The A/B is interleaved: within each repeat
the candidates and LayerNorm are timed one after the other (the order rotating), and each
speed ratio is quoted as the median and the 5-95 % range of its per-repeat values (keys
ending ``_p05`` / ``_p95`` in the JSON line). On a shared, loaded machine thread CPU time
still varies with cache and memory-bandwidth contention, which the interleaving spreads
evenly over candidate and baseline.

The dynamic layer is timed on the default ATen path and on the opt-in C++ selection kernels
(``actlab.activations.native``; keys ending ``_native``; skipped with a note if they cannot
be built, or with ``--no-native``). The frozen layer has no native path: it is one fused
multiply-add on ATen ops.

Last, the ``accumulation-stop`` experiment's own measurement on a few training steps
(``--train-steps``, 0 to skip): steps/s of the MLP and the ViT with Percentile Centering frozen
after warm-up, over steps/s with LayerNorm, by the experiment's clock and noise estimate.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor, nn

from actlab.activations import native
from actlab.experiments.accumulation_stop import norm_spec
from actlab.nn.norms import PercentileBatchNorm, PercentileLayerNorm
from actlab.train.timing import throughput


class QuantileReference(nn.Module):
    """Percentile Centering with ``torch.quantile``: the straightforward implementation."""

    def __init__(self, num_features: int, q: float, per_channel: bool) -> None:
        super().__init__()
        self.q, self.per_channel = q, per_channel
        self.weight = nn.Parameter(torch.ones(num_features))
        self.bias = nn.Parameter(torch.zeros(num_features))
        self.eps = 1e-5

    def forward(self, x: Tensor) -> Tensor:
        if self.per_channel:
            dims = [0, 2, 3]
            c = x.shape[1]
            flat = x.transpose(0, 1).reshape(c, -1)
            center = torch.quantile(flat, self.q, dim=1).view(1, c, 1, 1)
            shape = (1, c, 1, 1)
        else:
            dims = [-1]
            center = torch.quantile(x, self.q, dim=-1, keepdim=True)
            shape = (-1,)
        var = x.var(dim=dims, unbiased=False, keepdim=True)
        y = (x - center) * torch.rsqrt(var + self.eps)
        return y * self.weight.view(shape) + self.bias.view(shape)


CLOCKS = {"cpu": time.thread_time, "wall": time.perf_counter}
clock = CLOCKS["cpu"]


def _fwd_bwd(module: nn.Module, x: Tensor, grad: Tensor) -> Callable[[], None]:
    """One forward + backward (input and parameter gradients) of ``module`` on ``x``."""
    def once() -> None:
        xi = x.detach().requires_grad_(True)
        module(xi).backward(grad)
    return once


def time_fwd_bwd(module: nn.Module, x: Tensor, repeats: int, inner: int) -> float:
    """Median seconds of one forward + backward over ``repeats`` timings of ``inner`` calls."""
    return statistics.median(time_interleaved({"m": module}, x, repeats, inner)["m"])


def time_interleaved(modules: dict[str, nn.Module], x: Tensor, repeats: int, inner: int
                     ) -> dict[str, list[float]]:
    """Seconds of one forward + backward per module and repeat, the modules alternating.

    Within each repeat every module is timed once (``inner`` calls), in an order that rotates
    from repeat to repeat, so a slow spell of the machine hits candidate and baseline alike
    and the per-repeat ratio cancels it.
    """
    grad = torch.randn_like(x)
    calls = {name: _fwd_bwd(m, x, grad) for name, m in modules.items()}
    for once in calls.values():
        for _ in range(2):
            once()
    names = list(calls)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeats):
        for name in names[r % len(names):] + names[:r % len(names)]:
            once = calls[name]
            start = clock()
            for _ in range(inner):
                once()
            times[name].append((clock() - start) / inner)
    return times


def ratio_summary(base: list[float], cand: list[float]) -> tuple[float, float, float]:
    """Median and 5-95 % range of the per-repeat speed ratio ``base / cand``."""
    ratios = np.array(base) / np.array(cand)
    p05, med, p95 = np.percentile(ratios, [5, 50, 95])
    return float(med), float(p05), float(p95)


def check_same(a: nn.Module, b: nn.Module, x: Tensor) -> None:
    """The selection and quantile layers agree (so the timings compare like with like)."""
    torch.testing.assert_close(a(x), b(x), rtol=1e-4, atol=1e-4)


def bench_shape(shape: tuple[int, ...], q: float, repeats: int, inner: int, paths: list[str],
                emit: Callable[[str], None]) -> dict[str, float]:
    """Time the variants on one shape; return the ratios (dynamic ones per path)."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=gen)
    per_channel = len(shape) == 4
    if per_channel:
        dynamic: nn.Module = PercentileBatchNorm(shape[1], q=q)
        frozen: nn.Module = PercentileBatchNorm(shape[1], q=q, freeze_after=1)
        layernorm: nn.Module = nn.LayerNorm(list(shape[1:]))
        extra = {"batchnorm2d": nn.BatchNorm2d(shape[1])}
    else:
        dynamic = PercentileLayerNorm(shape[-1], q=q)
        frozen = PercentileLayerNorm(shape[-1], q=q, freeze_after=1)
        layernorm = nn.LayerNorm(shape[-1])
        extra = {}
    quantile = QuantileReference(shape[1] if per_channel else shape[-1], q, per_channel)
    frozen(x)  # one warm-up step collects the statistics, then Accumulation Stop
    assert frozen.frozen
    computed = frozen.stats_computed
    for path in paths:
        native.enable(path == "native")
        check_same(dynamic, quantile, x)
    native.enable(False)
    # torch.quantile is slow and no goal compares it closely: timed on its own, fewer repeats
    times = {"quantile": time_fwd_bwd(quantile, x, max(repeats // 10, 3), 1)}
    # candidates and baselines alternate within each repeat; the dynamic native path needs
    # the switch flipped around its calls, so it runs in its own interleaved series with
    # LayerNorm
    series = time_interleaved({"frozen": frozen, "layernorm": layernorm, **extra,
                               "dynamic_aten": dynamic}, x, repeats, inner)
    if "native" in paths:
        native.enable(True)
        native_series = time_interleaved({"dynamic_native": dynamic, "layernorm": layernorm},
                                         x, repeats, inner)
        native.enable(False)
    assert frozen.stats_computed == computed, "frozen layer computed statistics"
    times.update({k: statistics.median(v) for k, v in series.items()})
    if "native" in paths:
        times["dynamic_native"] = statistics.median(native_series["dynamic_native"])
    label = "x".join(map(str, shape))
    emit(f"shape {label} (q={q}): " + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in times.items()))
    ratios: dict[str, float] = {}

    def put(key: str, base: list[float], cand: list[float]) -> tuple[float, float, float]:
        med, lo, hi = ratio_summary(base, cand)
        ratios[key], ratios[key + "_p05"], ratios[key + "_p95"] = med, lo, hi
        return med, lo, hi

    med, lo, hi = put(f"frozen_speed_vs_layernorm_{label}", series["layernorm"], series["frozen"])
    emit(f"  frozen runs at {med:.2f}x LayerNorm's speed (5-95 %: {lo:.2f}-{hi:.2f}; goal "
         "median >= 1.0)")
    if "batchnorm2d" in series:
        put(f"frozen_speed_vs_batchnorm2d_{label}", series["batchnorm2d"], series["frozen"])
    for path in paths:
        suffix = "_native" if path == "native" else ""
        t = times[f"dynamic_{path}"]
        ratios[f"dynamic_speedup_vs_quantile_{label}{suffix}"] = times["quantile"] / t
        src = native_series if path == "native" else series
        med, lo, hi = put(f"dynamic_speed_vs_layernorm_{label}{suffix}", src["layernorm"],
                          src[f"dynamic_{path}"])
        emit(f"  {path}: dynamic is {times['quantile'] / t:.2f}x faster than torch.quantile "
             f"(goal >= 2), at {med:.3f}x LayerNorm's speed (5-95 %: {lo:.3f}-{hi:.3f}; "
             "goal >= 0.25)")
    return ratios


def bench_training(steps: int, emit: Callable[[str], None]) -> dict[str, float]:
    """The accumulation-stop experiment's measurement: steps/s after warm-up with Percentile
    Centering frozen, over LayerNorm's, per model, with the ratio's noise."""
    from actlab.data.images import load_image_data
    from actlab.nn.classifiers import build_classifier
    from actlab.train.settings import TrainSettings
    from actlab.train.supervised import train

    data = load_image_data()
    warmup = max(steps // 5, 1)
    figures: dict[str, float] = {}
    for model_kind in ("mlp", "vit"):
        rates: dict[str, tuple[float, float]] = {}
        for norm in ("layernorm", "percentile-frozen"):
            spec = norm_spec(norm, 0.5, warmup)
            norm_args = {"norm": spec} if model_kind == "vit" else {"pre_norm": spec}
            model = build_classifier(model_kind, data, "gelu" if model_kind == "vit" else "relu",
                                     seed=0, **norm_args)
            stamps = [clock()]
            settings = TrainSettings(lr=3e-3 if model_kind == "vit" else 1e-3, steps=steps)
            train(model, data.x_train, data.y_train, settings,
                  generator=torch.Generator().manual_seed(0),
                  on_step=lambda step, loss, stamps=stamps: stamps.append(clock()))
            rates[norm] = throughput(np.diff(stamps)[warmup:])
        (frozen, f_noise), (base, b_noise) = rates["percentile-frozen"], rates["layernorm"]
        ratio = frozen / base
        figures[f"train_frozen_speed_vs_layernorm_{model_kind}"] = ratio
        figures[f"train_frozen_speed_noise_{model_kind}"] = ratio * math.hypot(f_noise, b_noise)
        emit(f"training {model_kind}: frozen {frozen:.1f} steps/s, LayerNorm {base:.1f} steps/s, "
             f"ratio {ratio:.2f} ± {ratio * math.hypot(f_noise, b_noise):.2f} (goal >= 1.0)")
    return figures


def main() -> None:
    """Run the benchmark and print the figures (JSON on the last line)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--inner", type=int, default=3)
    parser.add_argument("--q", type=float, default=0.7)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: leave as is)")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="cpu",
                        help="cpu: this thread's CPU time (needs --threads 1); wall: elapsed time")
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    parser.add_argument("--no-native", action="store_true", help="skip the C++ kernel path")
    parser.add_argument("--train-steps", type=int, default=150,
                        help="training steps per model and norm (0: skip the training figures)")
    args = parser.parse_args()
    global clock
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.clock == "cpu" and torch.get_num_threads() != 1:
        parser.error("--clock cpu measures one thread: use --threads 1 or --clock wall")
    clock = CLOCKS[args.clock]
    repeats, inner = (5, 2) if args.quick else (args.repeats, args.inner)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), {args.clock} clock, "
          f"median of {repeats} x {inner}")
    paths = ["aten"]
    if not args.no_native:
        if native.enable() and native.selection() is not None:
            paths.append("native")
        else:
            print(f"native kernels unavailable: {native.build_error()}")
        native.enable(False)
    figures: dict[str, float] = {}
    for shape in ((256, 1024), (64, 64, 32, 32)):
        figures.update(bench_shape(shape, args.q, repeats, inner, paths, print))
    if args.train_steps:
        figures.update(bench_training(args.train_steps, print))
    goal_of = {"dynamic_speedup": 2.0, "dynamic_speed_vs_layernorm": 0.25,
               "frozen_speed_vs_layernorm": 1.0, "train_frozen_speed_vs_layernorm": 1.0}
    goals = {k: (v, g) for k, v in figures.items() for p, g in goal_of.items()
             if k.startswith(p) and not k.endswith(("_p05", "_p95"))}
    met = all(v >= g for v, g in goals.values())
    print(f"goals {'met' if met else 'NOT met'}: "
          + ", ".join(f"{k}={v:.2f}{'' if v >= g else ' (<' + str(g) + ')'}"
                      for k, (v, g) in goals.items()))
    print(json.dumps({k: round(v, 3) for k, v in figures.items()}))


if __name__ == "__main__":
    main()
