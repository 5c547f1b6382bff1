"""One GPU, one run: ensemble steps, teacher-student --full wall time, GPT-2-small throughput.

Figures (the GPU issue's benchmark), each against a baseline measured in the same run:

* ``ensemble_*``: one training step of 64 ``ResidualMLP(50, 200, 20)`` members on batch 256
  (Adam, the teacher-student ``--full`` shape): milliseconds per step, achieved TFLOP/s
  (forward + backward FLOPs from ``torch.utils.flop_counter``) and its fraction of the
  float32 matmul rate measured here, peak memory; the same for the step recorded as a CUDA
  graph (``EnsembleTrainer(graphed=True)``), and ``ensemble_graphed_speedup``, eager time
  over graphed time (null where graphs do not apply: off CUDA).
* ``gpt_*``: a GPT-2-small-shaped training step (12 layers, width 768, context 1024, batch
  16, bf16 autocast, AdamW), eager and with ``torch.compile``: tokens/s, fraction of the bf16
  matmul rate measured here (FLOPs per token ``6 N + 12 L H Q T``, nanoGPT's count), compile
  time, peak memory.
* ``teacher_student_full_s``: wall time of ``actlab run teacher-student --full --device cuda``
  (``--skip-full`` leaves it out).

Goals (GPU issue): graphed ensemble >= 5x eager; teacher-student --full <= 240 s on one H200;
GPT >= 55 % of the matmul rate compiled and >= 30 % eager. ``make gpu-bench`` runs it.
``--smoke`` runs tiny shapes on any device (a check of the script itself, not a benchmark).
The last line is one JSON object of the figures.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

from actlab.nn.gpt import GPT, GPTConfig
from actlab.nn.residual_mlp import ResidualMLP
from actlab.train.ensemble import Ensemble, EnsembleTrainer, count_step_flops
from actlab.train.functional_optim import FunctionalAdam
from actlab.train.timing import median_seconds


def _peak_reset(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def _peak_gib(device: torch.device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None


def matmul_tflops(device: torch.device, dtype: torch.dtype, size: int, repeats: int) -> float:
    """Square-matmul throughput in TFLOP/s (the baseline every fraction is taken against)."""
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    seconds = median_seconds(lambda: torch.mm(a, b), device, repeats, warmup=3)
    return 2 * size**3 / seconds / 1e12


def ensemble_figures(device: torch.device, shape: tuple[int, int, int], members: int,
                     batch: int, repeats: int, fp32_tflops: float) -> dict[str, float | None]:
    """Ensemble step, eager and (on CUDA) graphed: ms, TFLOP/s, fraction of fp32 matmul,
    peak memory, and the graphed speed-up over eager."""
    d, m, depth = shape
    models = [ResidualMLP(d, m, depth, "relu", generator=torch.Generator().manual_seed(s))
              for s in range(members)]
    x = torch.randn(members, batch, d, device=device)
    y = torch.randn(members, batch, d, device=device)
    flops = members * count_step_flops(models[0], F.mse_loss, x[0].cpu(), y[0].cpu())
    figures: dict[str, float | None] = {"ensemble_graphed_speedup": None}
    modes = ("eager", "graphed") if device.type == "cuda" else ("eager",)
    for mode in modes:
        trainer = EnsembleTrainer(Ensemble(models, device=device), F.mse_loss,
                                  FunctionalAdam(lr=1e-3), keep_freed_memory=False,
                                  graphed=mode == "graphed")
        _peak_reset(device)
        # Warm-up covers the graph's eager steps and its recording.
        seconds = median_seconds(lambda t=trainer: t.step(x, y), device, repeats, warmup=5)
        achieved = flops / seconds / 1e12
        figures.update({f"ensemble_{mode}_ms": seconds * 1e3,
                        f"ensemble_{mode}_tflops": achieved,
                        f"ensemble_{mode}_fraction_of_fp32_matmul": achieved / fp32_tflops,
                        f"ensemble_{mode}_peak_gib": _peak_gib(device)})
    if "ensemble_graphed_ms" in figures:
        figures["ensemble_graphed_speedup"] = (figures["ensemble_eager_ms"]
                                               / figures["ensemble_graphed_ms"])
    return figures


def gpt_figures(device: torch.device, config: GPTConfig, batch: int, repeats: int,
                bf16_tflops: float, compile_model: bool) -> dict[str, float | None]:
    """One bf16 training step: tokens/s and fraction of the bf16 matmul rate."""
    model = GPT(config, seed=0).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4,
                                  fused=device.type == "cuda")
    forward = torch.compile(model) if compile_model else model
    idx = torch.randint(0, config.vocab_size, (batch, config.block_size), device=device)

    def step() -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            _, loss = forward(idx, idx)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    start = time.perf_counter()
    step()  # the compile, when compiling
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    first = time.perf_counter() - start
    _peak_reset(device)
    seconds = median_seconds(step, device, repeats, warmup=3)
    tokens = batch * config.block_size
    n = model.num_params(embeddings=False)
    c = config
    flops_per_token = 6 * n + 12 * c.n_layer * c.n_head * (c.n_embd // c.n_head) * c.block_size
    achieved = flops_per_token * tokens / seconds / 1e12
    tag = "compiled" if compile_model else "eager"
    return {f"gpt_{tag}_tokens_per_s": tokens / seconds,
            f"gpt_{tag}_fraction_of_bf16_matmul": achieved / bf16_tflops,
            f"gpt_{tag}_first_step_s": first, f"gpt_{tag}_peak_gib": _peak_gib(device)}


def teacher_student_full_seconds(device: str) -> float:
    """Wall time of ``actlab run teacher-student --full`` on ``device``."""
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "from actlab.cli import main; main()", "run",
                        "teacher-student", "--full", "--device", device, "--out", out],
                       check=True)
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--skip-full", action="store_true",
                        help="leave out the teacher-student --full run")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny shapes on any device: checks the script, measures nothing")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda: no CUDA GPU here (use --smoke --device cpu to check the "
              "script)", file=sys.stderr)
        sys.exit(2)
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32 (as the runner's policy)
    if args.smoke:
        shape, members, batch, size = (6, 12, 2), 4, 8, 256
        gpt = GPTConfig(vocab_size=256, block_size=32, n_layer=2, n_head=2, n_embd=32)
        gpt_batch = 2
    else:
        shape, members, batch, size = (50, 200, 20), 64, 256, 8192
        gpt = GPTConfig(vocab_size=50304, block_size=1024, n_layer=12, n_head=12, n_embd=768)
        gpt_batch = 16
    repeats = 2 if args.smoke else args.repeats
    fp32 = matmul_tflops(device, torch.float32, size, repeats)
    bf16 = matmul_tflops(device, torch.bfloat16, size, repeats)
    figures: dict[str, float | None] = {"fp32_matmul_tflops": fp32, "bf16_matmul_tflops": bf16}
    figures.update(ensemble_figures(device, shape, members, batch, repeats, fp32))
    print(f"ensemble step (eager): {figures['ensemble_eager_ms']:.2f} ms, "
          f"{figures['ensemble_eager_fraction_of_fp32_matmul']:.1%} of fp32 matmul", flush=True)
    if figures["ensemble_graphed_speedup"] is not None:
        print(f"ensemble step (graphed): {figures['ensemble_graphed_ms']:.2f} ms, "
              f"{figures['ensemble_graphed_speedup']:.2f}x the eager step", flush=True)
    for compile_model in (False, True):
        if compile_model and args.smoke:
            continue  # a compile takes longer than the rest of the smoke run
        figures.update(gpt_figures(device, gpt, gpt_batch, repeats, bf16, compile_model))
    print(f"GPT step eager: {figures['gpt_eager_fraction_of_bf16_matmul']:.1%} of bf16 matmul",
          flush=True)
    if not (args.skip_full or args.smoke):
        figures["teacher_student_full_s"] = teacher_student_full_seconds(args.device)
    print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v)
                      for k, v in figures.items()}))


if __name__ == "__main__":
    main()
