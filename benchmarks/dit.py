"""DiT speed: a training step and DDIM sampling, against the fp32 matmul rate of the same run.

Measured, for the DiT of :mod:`actlab.nn.dit` and the diffusion of
:mod:`actlab.diffusion` (linear schedule, T = 1000, learned variance):

* ``train_*``: one training step, forward + backward + ``torch.optim.AdamW`` update, of
  :func:`~actlab.diffusion.diffusion_loss` (ε-MSE plus the VLB term) on a batch of
  random inputs with labels: ms per step, images/s, achieved GFLOP/s and its fraction of
  the fp32 matmul rate. FLOPs per step are ``3 x flops_per_image() x batch``: the forward
  count of :meth:`~actlab.nn.dit.DiT.flops_per_image` (a multiply-add is 2 FLOPs) and a
  backward of twice the forward; the AdamW update and the loss's elementwise work are not
  counted.
* ``matmul_gflops``: a square fp32 ``torch.mm`` of ``--matmul-size`` (default: the cube
  root of the M x K x N of the model's MLP up-projection over the training batch, so the
  baseline works on matrices of the model's scale), timed the same way (median of
  ``--repeats`` calls, the device synchronised around each). Training steps and matmuls
  alternate in ``--rounds`` rounds and each round's fraction uses that round's matmul, so
  load from other processes hits both alike; the medians over rounds are reported.
* ``ddim{K}_*``: :func:`~actlab.diffusion.ddim_sample` with K steps on
  ``--sample-batch`` images, ms per image, without guidance (one forward per step) and with
  classifier-free guidance at ``--cfg-scale`` (conditional and null-class passes in one
  batch of twice the size); ``cfg_over_unguided`` is their ratio (about 2 when the model
  dominates), ``overhead_vs_forward`` the unguided time over K forwards of the model alone
  at the same batch (1.0: the sampler's own arithmetic costs nothing).

Models: the default ``cpu`` DiT (16 x 16 x 1 inputs, patch 2, width 128, depth 4, 4 heads,
10 classes: digits-sized) or a reference name (``--model S/2``: DiT-S/2, by default at
32 x 32 x 4 latents and 1000 classes, the 256 x 256 ImageNet setting; meant for a GPU).
``--smoke`` runs a tiny model with few repeats: a check of the script, not a measurement.
The last line is one JSON object of the figures.

    python benchmarks/dit.py                          # CPU, one thread
    python benchmarks/dit.py --model S/2 --device cuda
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable

import torch

from actlab.diffusion import GaussianDiffusion, ddim_sample, diffusion_loss
from actlab.nn.dit import DIT_CONFIGS, DiT, DiTConfig, dit_config
from actlab.train.timing import median_seconds

CPU_CONFIG = {"input_size": 16, "patch_size": 2, "in_channels": 1, "hidden_size": 128,
              "depth": 4, "num_heads": 4, "num_classes": 10}
SMOKE_CONFIG = {"input_size": 8, "patch_size": 2, "in_channels": 1, "hidden_size": 32,
                "depth": 2, "num_heads": 2, "num_classes": 10}


def build_config(args: argparse.Namespace) -> DiTConfig:
    """The benchmarked model's configuration from the command line."""
    if args.smoke:
        return DiTConfig(**SMOKE_CONFIG)
    if args.model == "cpu":
        overrides = {k: v for k, v in (("input_size", args.input_size),
                                       ("in_channels", args.in_channels)) if v is not None}
        return DiTConfig(**{**CPU_CONFIG, **overrides})
    return dit_config(args.model, input_size=args.input_size or 32,
                      in_channels=args.in_channels or 4, num_classes=1000)


def auto_matmul_size(config: DiTConfig, batch: int) -> int:
    """Side of a square matmul with the FLOPs of the MLP up-projection over a training batch
    (rounded to a multiple of 64, at least 64)."""
    m = batch * config.num_patches
    volume = m * config.hidden_size * config.mlp_hidden
    return max(64, round(volume ** (1 / 3) / 64) * 64)


def matmul_gflops(device: torch.device, size: int, repeats: int) -> float:
    """fp32 square-matmul rate in GFLOP/s (2 n^3 FLOPs per product)."""
    a = torch.randn(size, size, device=device)
    b = torch.randn(size, size, device=device)
    seconds = median_seconds(lambda: torch.mm(a, b), device, repeats, warmup=2)
    return 2 * size ** 3 / seconds / 1e9


def training_step(model: DiT, diffusion: GaussianDiffusion, batch: int,
                  device: torch.device) -> Callable[[], None]:
    """One forward + backward + AdamW step on a fixed random batch (fresh t and noise each call)."""
    c = model.config
    data = torch.Generator().manual_seed(0)
    x0 = torch.rand(batch, c.in_channels, c.input_size, c.input_size, generator=data)
    x0 = (x0 * 2 - 1).to(device)  # in [-1, 1], like images
    y = torch.randint(0, c.num_classes, (batch,), generator=data).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0)
    draws = torch.Generator().manual_seed(1)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        diffusion_loss(diffusion, model, x0, y, generator=draws).backward()
        optimizer.step()

    return step


def train_figures(model: DiT, diffusion: GaussianDiffusion, args: argparse.Namespace,
                  device: torch.device, emit: Callable[[str], None]) -> dict[str, float]:
    """Training-step figures, the matmul baseline interleaved with them round by round."""
    model.train()
    step = training_step(model, diffusion, args.batch, device)
    flops = 3 * model.flops_per_image() * args.batch
    step()  # first step: allocations and the optimizer state, not timed
    seconds, matmuls, fractions = [], [], []
    for _ in range(args.rounds):
        matmuls.append(matmul_gflops(device, args.matmul_size, args.repeats))
        seconds.append(median_seconds(step, device, args.repeats, warmup=1))
        fractions.append(flops / seconds[-1] / 1e9 / matmuls[-1])
    t = statistics.median(seconds)
    figures = {"matmul_gflops": statistics.median(matmuls), "train_ms_per_step": t * 1e3,
               "train_images_per_s": args.batch / t, "train_gflops": flops / t / 1e9,
               "train_fraction_of_matmul": statistics.median(fractions)}
    emit(f"train step, batch {args.batch}: {t * 1e3:.1f} ms, {args.batch / t:.1f} images/s, "
         f"{figures['train_gflops']:.1f} GFLOP/s = {figures['train_fraction_of_matmul']:.1%} of "
         f"the {args.matmul_size}^2 fp32 matmul ({figures['matmul_gflops']:.1f} GFLOP/s; "
         f"per round {min(fractions):.1%}-{max(fractions):.1%})")
    return figures


def sample_figures(model: DiT, diffusion: GaussianDiffusion, args: argparse.Namespace,
                   device: torch.device, emit: Callable[[str], None]) -> dict[str, float]:
    """DDIM cost per image at each step count, unguided and guided, and the bare forward."""
    model.eval()
    c = model.config
    n = args.sample_batch
    shape = (n, c.in_channels, c.input_size, c.input_size)
    y = torch.randint(0, c.num_classes, (n,), generator=torch.Generator().manual_seed(2))
    x = torch.randn(shape, generator=torch.Generator().manual_seed(3)).to(device)
    t = torch.full((n,), diffusion.num_timesteps // 2, dtype=torch.long, device=device)
    y_device = y.to(device)
    with torch.no_grad():
        forward = median_seconds(lambda: model(x, t, y_device), device, args.repeats)
    figures = {"sample_forward_ms_per_image": forward / n * 1e3}
    emit(f"forward alone, batch {n}: {forward / n * 1e3:.2f} ms/image")
    for steps in args.ddim_steps:
        per_image = {}
        for scale in (1.0, args.cfg_scale):
            def run(scale: float = scale, steps: int = steps) -> None:
                ddim_sample(model, diffusion, shape, y, generator=torch.Generator().manual_seed(4),
                            steps=steps, cfg_scale=scale, device=device)
            per_image[scale] = median_seconds(run, device, args.sample_repeats, warmup=1) / n
        plain, guided = per_image[1.0], per_image[args.cfg_scale]
        key = f"ddim{steps}"
        figures.update({f"{key}_ms_per_image": plain * 1e3, f"{key}_cfg_ms_per_image": guided * 1e3,
                        f"{key}_cfg_over_unguided": guided / plain,
                        f"{key}_overhead_vs_forward": plain / (steps * forward / n)})
        emit(f"DDIM {steps} steps: {plain * 1e3:.1f} ms/image, with guidance (scale "
             f"{args.cfg_scale}) {guided * 1e3:.1f} ms/image ({guided / plain:.2f}x); "
             f"{plain / (steps * forward / n):.2f}x the cost of {steps} bare forwards")
    return figures


def parse_steps(text: str) -> list[int]:
    """``"10,25"`` -> ``[10, 25]``: DDIM step counts, each >= 1."""
    try:
        steps = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--ddim-steps: comma-separated integers, got {text!r}") from None
    if not steps or min(steps) < 1:
        raise argparse.ArgumentTypeError(f"--ddim-steps: counts must be >= 1, got {text!r}")
    return steps


def main() -> None:
    """Run the benchmark and print its figures (last line JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="cpu", choices=["cpu", *DIT_CONFIGS],
                        help="cpu: the small default DiT; or a reference size/patch name")
    parser.add_argument("--input-size", type=int, default=None,
                        help="input side (default 16 for cpu, 32 for reference models)")
    parser.add_argument("--in-channels", type=int, default=None,
                        help="input channels (default 1 for cpu, 4 for reference models)")
    parser.add_argument("--batch", type=int, default=None,
                        help="training batch (default 32 for cpu, 256 for reference models)")
    parser.add_argument("--sample-batch", type=int, default=8)
    parser.add_argument("--ddim-steps", type=parse_steps, default=[10, 25])
    parser.add_argument("--cfg-scale", type=float, default=1.5,
                        help="guidance scale of the guided sampler (DiT's FID setting)")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per median")
    parser.add_argument("--sample-repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved matmul/train rounds")
    parser.add_argument("--matmul-size", type=int, default=0, help="0: matched to the model")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: leave as is)")
    parser.add_argument("--tf32", action="store_true",
                        help="allow TF32 matmuls on CUDA (the baseline matmul too)")
    parser.add_argument("--smoke", action="store_true",
                        help="a tiny model and few repeats: checks the script, measures nothing")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print(f"error: --device {args.device}: no CUDA GPU here", file=sys.stderr)
        sys.exit(2)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.tf32:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    if args.smoke:
        args.batch, args.sample_batch, args.ddim_steps = 4, 2, [2]
        args.repeats, args.sample_repeats, args.rounds = 2, 1, 1
    if args.batch is None:
        args.batch = 32 if args.model == "cpu" else 256
    config = build_config(args)
    if not args.matmul_size:
        args.matmul_size = auto_matmul_size(config, args.batch)
    model = DiT(config, seed=0).to(device)
    diffusion = GaussianDiffusion.linear(1000)
    name = "smoke" if args.smoke else args.model
    print(f"torch {torch.__version__}, {args.device}, {torch.get_num_threads()} thread(s); "
          f"DiT {name}: {config.input_size}x{config.input_size}x{config.in_channels}, patch "
          f"{config.patch_size}, width {config.hidden_size}, depth {config.depth}, "
          f"{model.num_params() / 1e6:.2f} M parameters, "
          f"{model.flops_per_image() / 1e9:.3f} GFLOP forward per image")
    figures: dict[str, float | str | int] = {
        "model": name, "device": args.device, "threads": torch.get_num_threads(),
        "batch": args.batch, "params": model.num_params(), "matmul_size": args.matmul_size,
        "forward_flops_per_image": model.flops_per_image()}
    figures.update(train_figures(model, diffusion, args, device, print))
    figures.update(sample_figures(model, diffusion, args, device, print))
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in figures.items()}))


if __name__ == "__main__":
    main()
