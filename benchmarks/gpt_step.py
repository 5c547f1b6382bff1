"""GPT training-step cost of the language-model experiments: Muon + AdamW against AdamW alone.

For each scale, the byte-level GPT of :mod:`actlab.nn.gpt` (GELU, plain FFN) takes full
training steps as the engine takes them (:class:`~actlab.train.loop.Trainer`: forward,
backward, gradient clipping where the recipe clips, the optimizer's step, zeroed gradients)
on a fixed batch, with two optimizers built by the engine's own factory
(:func:`~actlab.train.loop.make_engine_optimizer`):

* ``adamw``: the recipe before gpt-nano (``LMScale(optimizer="adamw")``: AdamW, decay 0.1 on
  matrices, clipping at 1);
* ``muon``: the gpt-nano recipe (``LMScale()``: Muon on the hidden matrices, five
  Newton-Schulz steps each in ``--muon-ns-dtype``, by default ``auto``: float32 on the CPU,
  bfloat16 on CUDA; AdamW on the rest, no clipping).

Reported per scale and optimizer: ms per step and tokens/s (median over ``--rounds`` rounds of
the median of ``--repeats`` steps, the two optimizers alternating round by round so load from
other processes hits both alike), the optimizer's update alone (``opt.step()`` on fixed
gradients), and the ratios muon / adamw of both. Scales: ``quick`` (lm-shift's and gated-ffn's
``--quick``: 2 layers, width 64, context 64, batch 16), ``quick4`` (spikes' ``--quick``: 4
layers), ``default`` (4 layers, width 128, context 128, batch 32). ``--smoke`` runs a tiny
model with few repeats: a check of the script, not a measurement. The last line is one JSON
object of the figures.

    python benchmarks/gpt_step.py                       # every scale, one thread
    python benchmarks/gpt_step.py --scales default --threads 0
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable

import torch

from actlab.nn.gpt import GPT
from actlab.recipes.language_model import LMScale
from actlab.train.loop import make_engine_optimizer
from actlab.train.muon import NS_DTYPES
from actlab.train.timing import median_seconds

SCALES: dict[str, dict[str, int]] = {
    "quick": {"n_layer": 2, "n_embd": 64, "block_size": 64, "batch_size": 16},
    "quick4": {"n_layer": 4, "n_embd": 64, "block_size": 64, "batch_size": 16},
    "default": {"n_layer": 4, "n_embd": 128, "block_size": 128, "batch_size": 32},
}
SMOKE = {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 16, "batch_size": 4}
OPTIMIZERS = ("adamw", "muon")


def step_functions(shape: dict[str, int], optimizer: str, device: torch.device,
                   ns_dtype: str = "auto") -> tuple[Callable[[], None], Callable[[], None]]:
    """``(training step, optimizer update alone)`` of the engine for one scale and optimizer."""
    scale = LMScale(**shape, optimizer=optimizer, compile_model="off", muon_ns_dtype=ns_dtype)
    config = scale.train_config()
    model = GPT(scale.model_config(), seed=0).to(device)
    optimizer_ = make_engine_optimizer(model, config)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (scale.batch_size, scale.block_size), generator=g).to(device)
    y = torch.roll(x, -1, dims=1)

    def train_step() -> None:
        loss = model(x, targets=y)[1]
        loss.backward()
        if config.grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer_.step()
        optimizer_.zero_grad(set_to_none=True)

    train_step()  # the optimizer state exists from here on
    model(x, targets=y)[1].backward()  # fixed gradients for the update alone
    grads = [(p, p.grad) for p in model.parameters()]
    optimizer_.zero_grad(set_to_none=True)

    def update() -> None:
        for param, grad in grads:  # training steps in between drop the gradients
            param.grad = grad
        optimizer_.step()

    return train_step, update


def measure(shape: dict[str, int], args: argparse.Namespace, device: torch.device
            ) -> dict[str, float]:
    """Step and update times of both optimizers at one scale, in alternating rounds."""
    fns = {name: step_functions(shape, name, device, args.muon_ns_dtype) for name in OPTIMIZERS}
    times: dict[str, list[float]] = {f"{n}_{k}": [] for n in OPTIMIZERS for k in ("step", "update")}
    for _ in range(args.rounds):
        for name in OPTIMIZERS:
            train_step, update = fns[name]
            times[f"{name}_step"].append(median_seconds(train_step, device, args.repeats, 1))
            times[f"{name}_update"].append(median_seconds(update, device, args.repeats, 1))
    tokens = shape["batch_size"] * shape["block_size"]
    out: dict[str, float] = {}
    for name in OPTIMIZERS:
        step, update = (statistics.median(times[f"{name}_{k}"]) for k in ("step", "update"))
        out.update({f"{name}_ms_per_step": step * 1e3, f"{name}_tokens_per_s": tokens / step,
                    f"{name}_update_ms": update * 1e3})
    out["muon_over_adamw_step"] = out["muon_ms_per_step"] / out["adamw_ms_per_step"]
    out["muon_over_adamw_update"] = out["muon_update_ms"] / out["adamw_update_ms"]
    return out


def main() -> None:
    """Run the benchmark and print its figures (last line JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", default="quick,quick4,default",
                        help=f"comma-separated, of {', '.join(SCALES)}")
    parser.add_argument("--repeats", type=int, default=5, help="timed steps per median")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    parser.add_argument("--muon-ns-dtype", default="auto", choices=NS_DTYPES,
                        help="dtype of Muon's Newton-Schulz iteration")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: leave as is)")
    parser.add_argument("--smoke", action="store_true",
                        help="a tiny model and few repeats: checks the script, measures nothing")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print(f"error: --device {args.device}: no CUDA GPU here", file=sys.stderr)
        sys.exit(2)
    names = [s.strip() for s in args.scales.split(",") if s.strip()]
    unknown = [s for s in names if s not in SCALES]
    if unknown or not names:
        print(f"error: --scales: unknown {unknown or names}; valid: {', '.join(SCALES)}",
              file=sys.stderr)
        sys.exit(2)
    if args.threads:
        torch.set_num_threads(args.threads)
    shapes = {"smoke": SMOKE} if args.smoke else {n: SCALES[n] for n in names}
    if args.smoke:
        args.repeats, args.rounds = 2, 1
    figures: dict[str, object] = {"device": str(device), "threads": torch.get_num_threads(),
                                  "torch": torch.__version__,
                                  "muon_ns_dtype": args.muon_ns_dtype}
    for name, shape in shapes.items():
        result = measure(shape, args, device)
        figures[name] = {**shape, **result}
        print(f"{name} ({shape['n_layer']} layers, d={shape['n_embd']}, context "
              f"{shape['block_size']}, batch {shape['batch_size']}): adamw "
              f"{result['adamw_ms_per_step']:.1f} ms/step ({result['adamw_tokens_per_s']:,.0f} "
              f"tokens/s), muon {result['muon_ms_per_step']:.1f} ms/step "
              f"({result['muon_tokens_per_s']:,.0f} tokens/s): {result['muon_over_adamw_step']:.2f}x;"
              f" update alone {result['adamw_update_ms']:.2f} vs {result['muon_update_ms']:.2f} ms "
              f"({result['muon_over_adamw_update']:.1f}x)", flush=True)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
