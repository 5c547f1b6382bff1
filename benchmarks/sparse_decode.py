"""Sparsity turned into decoding speed: the sparse decode kernel against torch's dense FFN.

Three cases, one and eight tokens per forward:

* ``llama7b``: one FFN of LLaMA-7B's shape (d 4096, hidden 11008, gated SiLU, random weights
  N(0, 0.02)), float32 and bfloat16, with i.i.d. random sparsity masks (fixed seed, a fresh
  mask per repeat so that no repeat finds the previous one's rows in cache) at 40-90 %:
  TEAL form (the FFN input and the down projection's input masked; every projection reads
  only the rows of its active inputs) and activation form (the gate's output masked, as a
  ReLU's zeros are; gate read in full, up rows and down columns skipped). Both run through
  ``actlab.nn.sparse_ffn.sparse_ffn(method="kernel")``;
* ``minilm-relu``: all-MiniLM-L6-v2 ReLUfied (GELU -> ReLU, ``actlab.relufy_``, then a brief
  self-distillation toward the original's sentence embeddings, as ``relufy-pretrained``
  does), on windows of stdlib docstring tokens: activation form (its real zeros) and TEAL;
* ``gpt``: an actlab GPT at the experiments' default size (4 x 128, FFN 512, GELU) trained
  here briefly on stdlib bytes, on windows of validation bytes: TEAL.

Dense baseline: torch's own matmul (``nn.Linear``) on the same threads
(``torch.set_num_threads``), timed in the same run, interleaved with the sparse variants
(the order rotates every repeat); median over repeats of this thread's CPU time on one
thread, of wall time on two; speed-up = dense time / sparse time. Bound: the speed-up if
time were proportional to the weight bytes that must be read (dense bytes / the bytes of
the active rows, from the actual masks; one token of TEAL: ``1 / (1 - s)``, activation form
``1 / (1/3 + 2 (1 - s) / 3)``). Bandwidth: bytes that must be read / time, as a fraction of
the copy bandwidth measured in the same interleaved run (``Tensor.copy_`` of 256 MiB, bytes
read + written / time, same threads). Break-even: the active share above which dense is
faster, dense time over the kernel's time with every input active (the kernel forced on);
for models whose FFN matrices fit ``sparse_kernel.SMALL_MATRIX_BYTES`` (our GPT), the whole
model with the kernel forced on against the dense product of the masked input forced on, at
each sparsity, gives ``small_matrix_break_even`` (what ``sparse_kernel.BREAK_EVEN_SMALL``
holds). The model cases run ``method="auto"`` and ``--model-repeats`` repeats (a forward of
our GPT is about a millisecond).
Quality: TEAL at 40/50/70/85 % with thresholds calibrated on training data, on held-out
data: the GPT's validation loss, MiniLM's sentence-embedding cosine to the
dense model. Last line: one JSON object of the figures.
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
import torch.nn.functional as F
from torch import Tensor, nn

from actlab.nn import sparse_kernel
from actlab.nn.ffn import GatedFFN
from actlab.nn.sparse_calibration import SiteThresholds, calibrate_thresholds, run_batch
from actlab.nn.sparse_ffn import sparse_ffn, sparse_inference

D_MODEL, HIDDEN = 4096, 11008  # LLaMA-7B's FFN
SPARSITIES = (0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9)
QUALITY_SPARSITIES = (0.4, 0.5, 0.7, 0.85)
BREAK_EVEN_SPARSITIES = (0.0, 0.1, 0.2, 0.3)


class MaskedSiLU(nn.Module):
    """SiLU times a mask set before each call: the zeros of a sparse activation, i.i.d."""

    def __init__(self) -> None:
        super().__init__()
        self.mask: Tensor | None = None

    def forward(self, x: Tensor) -> Tensor:
        """``silu(x) * mask``."""
        y = F.silu(x)
        return y if self.mask is None else y * self.mask


def interleaved(variants: dict[str, Callable[[int], float]], repeats: int) -> dict[str, float]:
    """Median time per variant; a variant gets the repeat index and returns its timed part's
    seconds. One warm-up round; the order rotates from repeat to repeat."""
    names = list(variants)
    for name in names:
        variants[name](0)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeats):
        for name in names[r % len(names):] + names[:r % len(names)]:
            times[name].append(variants[name](r + 1))
    return {n: statistics.median(t) for n, t in times.items()}


def timed(fn: Callable[[], Any]) -> float:
    """Seconds ``fn()`` takes: this thread's CPU time on one thread (the shared machine's other
    processes do not count), wall time on several (the workers' time is not this thread's)."""
    clock = time.thread_time if torch.get_num_threads() == 1 else time.perf_counter
    start = clock()
    fn()
    return clock() - start


COPY_FLOATS = 1 << 26  # 256 MiB


def copy_variant() -> Callable[[int], float]:
    """A timed ``Tensor.copy_`` of 256 MiB (STREAM's copy: bytes read + written over time)."""
    src = torch.ones(COPY_FLOATS)
    dst = torch.ones(COPY_FLOATS)  # touched: no page faults in the timed copies
    return lambda _r: timed(lambda: dst.copy_(src))


# ---- (a) LLaMA-7B's FFN ------------------------------------------------------------------

def llama_ffn(dtype: torch.dtype, seed: int, shape: tuple[int, int]
              ) -> tuple[GatedFFN, dict[str, Tensor]]:
    """The gated FFN with N(0, 0.02) weights and its transposed (input-major) copies."""
    with torch.device("meta"):
        ffn = GatedFFN(*shape, MaskedSiLU())
    ffn = ffn.to_empty(device="cpu")
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in ffn.parameters():
            p.normal_(0.0, 0.02, generator=gen)
    ffn = ffn.to(dtype).eval()
    caches = {name: getattr(ffn, name).weight.t().contiguous()
              for name in ("gate_proj", "up", "down")}
    return ffn, caches


def llama_rows(dtype: torch.dtype, tokens: int, threads: int, sparsities: Sequence[float],
               repeats: int, seed: int,
               shape: tuple[int, int] = (D_MODEL, HIDDEN)) -> list[dict[str, Any]]:
    """Dense, TEAL and activation form at each sparsity, and the forced kernel at 0-30 %."""
    ffn, t = llama_ffn(dtype, seed, shape)
    d_model, hidden = shape
    act: MaskedSiLU = ffn.act  # type: ignore[assignment]
    size = torch.finfo(dtype).bits // 8
    gen = torch.Generator().manual_seed(seed + 1)
    pool = repeats + 1
    x = [torch.randn(tokens, d_model, generator=gen).to(dtype) for _ in range(pool)]
    levels = sorted(set(sparsities) | set(BREAK_EVEN_SPARSITIES))
    masks = {s: [(torch.rand(tokens, d_model, generator=gen) >= s,
                  torch.rand(tokens, hidden, generator=gen) >= s) for _ in range(pool)]
             for s in levels}

    def dense(r: int) -> float:
        act.mask = masks[levels[-1]][r][1].to(dtype)  # the same elementwise work as the others
        return timed(lambda: ffn(x[r]))

    def teal(s: float) -> Callable[[int], float]:
        def run(r: int) -> float:
            x_mask, h_mask = masks[s][r]
            xs = x[r] * x_mask
            act.mask = h_mask.to(dtype)  # h = act(gate) * up: its zeros are the mask's
            return timed(lambda: sparse_ffn(ffn, xs, method="kernel", thresholds=SiteThresholds(
                0.0, 0.0), down_t=t["down"], up_t=t["up"], gate_t=t["gate_proj"]))
        return run

    def activation(s: float) -> Callable[[int], float]:
        def run(r: int) -> float:
            act.mask = masks[s][r][1].to(dtype)
            return timed(lambda: sparse_ffn(ffn, x[r], method="kernel", down_t=t["down"]))
        return run

    def forced(s: float) -> Callable[[int], float]:
        run = teal(s)

        def no_switch(r: int) -> float:
            limit, sparse_kernel.DENSE_ABOVE = sparse_kernel.DENSE_ABOVE, 2.0  # never dense
            try:
                return run(r)
            finally:
                sparse_kernel.DENSE_ABOVE = limit
        return no_switch

    variants: dict[str, Callable[[int], float]] = {"dense": dense, "copy": copy_variant()}
    for s in sparsities:
        variants[f"teal{s}"] = teal(s)
        variants[f"act{s}"] = activation(s)
    for s in BREAK_EVEN_SPARSITIES:
        variants[f"forced{s}"] = forced(s)
        variants[f"teal{s}"] = teal(s)
    with torch.no_grad():
        times = interleaved(variants, repeats)
    bandwidth = 2 * COPY_FLOATS * 4 / times["copy"]
    matrix = d_model * hidden * size
    rows = []
    for s in levels:
        x_share = statistics.fmean(float(m[0].any(0).float().mean()) for m in masks[s])
        h_share = statistics.fmean(float(m[1].any(0).float().mean()) for m in masks[s])
        forms = {"teal": (2 * x_share + h_share) * matrix, "activation": (1 + 2 * h_share) * matrix}
        for form, need in forms.items():
            key = f"{'teal' if form == 'teal' else 'act'}{s}"
            if key not in times:
                continue
            row = {"case": "llama7b", "dtype": str(dtype).replace("torch.", ""),
                   "tokens": tokens, "threads": threads, "form": form, "sparsity": s,
                   "speedup": times["dense"] / times[key], "bound": 3 * matrix / need,
                   "dense_ms": times["dense"] * 1e3, "sparse_ms": times[key] * 1e3,
                   "bandwidth_fraction": need / times[key] / bandwidth,
                   "dense_bandwidth_fraction": 3 * matrix / times["dense"] / bandwidth,
                   "copy_bandwidth_gbs": bandwidth / 1e9}
            if f"forced{s}" in times:
                row["forced_kernel_speedup"] = times["dense"] / times[f"forced{s}"]
            row["bound_fraction"] = row["speedup"] / row["bound"]
            rows.append(row)
    return rows


def break_even(rows: list[dict[str, Any]]) -> float | None:
    """The active share above which dense is faster: dense time over the kernel's time with
    every input active (the kernel's time is about proportional to the active rows), at most
    1 (the kernel never slower)."""
    full = [r["forced_kernel_speedup"] for r in rows
            if r["sparsity"] == 0.0 and "forced_kernel_speedup" in r]
    return min(1.0, full[0]) if full else None


# ---- (b), (c): models with their real activations ----------------------------------------

def relufied_minilm(steps: int, texts: list[str], tokenizer: Any, original: nn.Module,
                    seed: int) -> nn.Module:
    """A copy of MiniLM with ReLU MLPs, fine-tuned ``steps`` AdamW steps so that its mean-
    pooled embeddings match the original's (cosine loss), dropout on, as relufy-pretrained."""
    import copy

    from actlab.hf import batched_embeddings, mean_pooled
    from actlab.surgery import relufy_
    from actlab.train.loop import TrainConfig, Trainer

    model = copy.deepcopy(original)
    relufy_(model)
    if steps:
        batch = tokenizer(texts, truncation=True, max_length=64, padding="max_length",
                          return_tensors="pt")
        ids, mask = batch["input_ids"], batch["attention_mask"]
        teacher = batched_embeddings(original, ids, mask)

        def train_batch(step: int) -> tuple[Tensor, Tensor, Tensor]:
            index = torch.randint(0, len(ids), (16,),
                                  generator=torch.Generator().manual_seed(seed * 7919 + step))
            return ids[index], mask[index], teacher[index]

        def loss_fn(net: nn.Module, b: tuple[Tensor, Tensor, Tensor]) -> Tensor:
            out = net(input_ids=b[0], attention_mask=b[1]).last_hidden_state
            return (1 - F.cosine_similarity(mean_pooled(out, b[1]), b[2], dim=-1)).mean()

        config = TrainConfig(steps=steps, lr=1e-4, warmup=max(1, steps // 10), weight_decay=0.01,
                             eval_every=0, log_every=steps, beta2=0.999)
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            Trainer(model, config, train_batch, loss_fn=loss_fn).fit()
    return model.eval()


@dataclass
class FFNView:
    """One FFN of a model: its thresholds key, its forward, the module reading its input (the
    first projection) and its down projection."""

    key: str
    forward: Callable[[Tensor], Tensor]
    reads_input: nn.Module
    down: nn.Module


@dataclass
class ModelCase:
    """A model with its windows (tokens -> model inputs) and FFNs."""

    name: str
    model: nn.Module
    windows: dict[int, list[Any]]
    ffns: list[FFNView]
    activation_form: bool
    note: str


def captured(case: ModelCase, wins: list[Any]) -> list[list[tuple[Tensor, Tensor]]]:
    """Per window, per FFN: its input and its down projection's input in a dense forward."""
    out = []
    for w in wins:
        seen: dict[int, Tensor] = {}
        modules = [m for f in case.ffns for m in (f.reads_input, f.down)]
        handles = [m.register_forward_pre_hook(
            lambda m, a, seen=seen: seen.__setitem__(id(m), a[0].detach())) for m in modules]
        with torch.no_grad():
            run_batch(case.model, w)
        for h in handles:
            h.remove()
        out.append([(seen[id(f.reads_input)], seen[id(f.down)]) for f in case.ffns])
    return out


def union_share(x: Tensor, threshold: float) -> float:
    """Share of the features active (``|x| > threshold``) for some token of ``x``."""
    return float((x.reshape(-1, x.shape[-1]).abs() > threshold).any(0).float().mean())


def model_rows(case: ModelCase, thresholds: dict[float, dict[str, SiteThresholds]],
               repeats: int) -> list[dict[str, Any]]:
    """End-to-end tokens/s and FFN-level speed-ups, dense against each sparse form."""
    forms: dict[str, dict[str, Any]] = {"activation": {}} if case.activation_form else {}
    for s, th in thresholds.items():
        forms[f"teal{s}"] = {"thresholds": th}
    small = all(f.down.weight.numel() * f.down.weight.element_size()
                <= sparse_kernel.SMALL_MATRIX_BYTES for f in case.ffns)
    rows = []
    for tokens, wins in case.windows.items():
        inputs = captured(case, wins)

        def run_model(_r: int, wins: list[Any] = wins) -> float:
            return timed(lambda: [run_batch(case.model, w) for w in wins])

        def run_ffns(_r: int, inputs: list[Any] = inputs) -> float:
            return timed(lambda: [f.forward(x) for per in inputs
                                  for f, (x, _) in zip(case.ffns, per)])

        def inside(kwargs: dict[str, Any], body: Callable[[int], float],
                   limit: float | None = None) -> Callable[[int], float]:
            def run(r: int) -> float:
                saved, sparse_kernel.DENSE_ABOVE = sparse_kernel.DENSE_ABOVE, limit
                try:
                    with sparse_inference(case.model, method="auto", **kwargs):
                        return body(r)
                finally:
                    sparse_kernel.DENSE_ABOVE = saved
            return run

        variants = {"dense": run_model, "dense_ffn": run_ffns}
        for form, kwargs in forms.items():
            variants[form] = inside(kwargs, run_model)
            variants[form + "_ffn"] = inside(kwargs, run_ffns)
            if small and "thresholds" in kwargs:  # what sets BREAK_EVEN_SMALL
                variants[form + "_kernel"] = inside(kwargs, run_model, 2.0)  # never dense
                variants[form + "_masked_dense"] = inside(kwargs, run_model, 0.0)  # always
        with torch.no_grad():
            times = interleaved(variants, repeats)
        n = tokens * len(wins)
        for form, kwargs in forms.items():
            th = kwargs.get("thresholds")
            x_share = statistics.fmean(
                1.0 if th is None else union_share(x, th[f.key].ffn_input)
                for per in inputs for f, (x, _) in zip(case.ffns, per))
            h_share = statistics.fmean(
                union_share(h, 0.0 if th is None else th[f.key].down_input)
                for per in inputs for f, (_, h) in zip(case.ffns, per))
            bound = 2 / (x_share + h_share)  # a plain FFN: two matrices equal in bytes
            ffn_speedup = times["dense_ffn"] / times[form + "_ffn"]
            rows.append({
                "case": case.name, "tokens": tokens,
                "form": "teal" if th is not None else "activation",
                "sparsity": float(form[4:]) if th is not None else None,
                "tokens_per_s_dense": n / times["dense"], "tokens_per_s_sparse": n / times[form],
                "model_speedup": times["dense"] / times[form], "ffn_speedup": ffn_speedup,
                "ffn_bound": bound, "ffn_bound_fraction": ffn_speedup / bound,
                "ffn_share_of_dense_time": times["dense_ffn"] / times["dense"],
                "active_share_ffn_input": x_share, "active_share_down_input": h_share,
            })
            if form + "_kernel" in times:
                rows[-1]["kernel_model_speedup"] = times["dense"] / times[form + "_kernel"]
                rows[-1]["masked_dense_model_speedup"] = (times["dense"]
                                                          / times[form + "_masked_dense"])
    return rows


def small_break_even(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per tokens per call, the active share (mean of the FFN input's and the down input's
    union) above which the dense product of the masked input ran the whole model faster than
    the kernel, on a model whose FFN matrices fit :data:`sparse_kernel.SMALL_MATRIX_BYTES`:
    midway between the densest level the kernel won and the sparsest it lost; 1.0 where it
    never lost, 0.0 where it never won below its first loss."""
    out: dict[str, Any] = {}
    for tokens in sorted({r["tokens"] for r in rows if "kernel_model_speedup" in r}):
        points = sorted(((r["active_share_ffn_input"] + r["active_share_down_input"]) / 2,
                         r["kernel_model_speedup"] / r["masked_dense_model_speedup"])
                        for r in rows if r["tokens"] == tokens and "kernel_model_speedup" in r)
        losses = [a for a, ratio in points if ratio < 1.0]
        if not losses:
            gate = 1.0
        else:
            wins = [a for a, ratio in points if ratio >= 1.0 and a < min(losses)]
            gate = (max(wins) + min(losses)) / 2 if wins else 0.0
        out[f"t{tokens}"] = gate
        out[f"t{tokens}_points"] = [[a, ratio] for a, ratio in points]
    return out


def minilm_cases(windows: int, steps: int, seed: int, calibration: int, n_eval: int
                 ) -> tuple[ModelCase, dict[str, Any]]:
    """The ReLUfied MiniLM case, and what the quality measure needs (original, texts)."""
    from actlab.data.text import docstrings
    from actlab.hf import encode_each, load_hf_model

    original, tokenizer = load_hf_model(device="cpu")
    texts = docstrings(n_eval + 128 + calibration * 8, min_chars=120)
    eval_texts, train_texts = texts[:n_eval], texts[n_eval:n_eval + 128]
    calib_texts = texts[n_eval + 128:]
    model = relufied_minilm(steps, train_texts, tokenizer, original, seed)
    ids: list[int] = []
    for text in train_texts:
        ids.extend(tokenizer(text)["input_ids"])
    stream = torch.tensor(ids)
    wins = {t: [{"input_ids": stream[i * 64:i * 64 + t].unsqueeze(0)} for i in range(windows)]
            for t in (1, 8)}
    layers = list(model.encoder.layer)
    ffns = [FFNView(f"encoder.layer.{i}.output.dense",
                    lambda x, la=la: la.output.dense(la.intermediate(x)),
                    la.intermediate.dense, la.output.dense) for i, la in enumerate(layers)]
    calib = [dict(tokenizer(calib_texts[i * 8:(i + 1) * 8], truncation=True, max_length=64,
                            padding=True, return_tensors="pt")) for i in range(calibration)]
    extra = {"original": original, "eval": encode_each(tokenizer, eval_texts, 64),
             "calibration": calib}
    note = (f"all-MiniLM-L6-v2 (6 x 384, FFN 1536), GELU -> ReLU, {steps} self-distillation "
            "steps; windows of stdlib docstring tokens")
    return ModelCase("minilm-relu", model, wins, ffns, True, note), extra


def gpt_case(windows: int, steps: int, seed: int, calibration: int
             ) -> tuple[ModelCase, dict[str, Any]]:
    """Our GPT (experiments' default size, GELU), trained ``steps`` AdamW steps here."""
    from actlab.data.text import stdlib_corpus
    from actlab.nn.gpt import GPTConfig
    from actlab.recipes.language_model import lm_batches, train_gpt
    from actlab.train.loop import TrainConfig

    corpus = stdlib_corpus()
    config = GPTConfig(block_size=64)
    train = TrainConfig(steps=steps, warmup=max(1, steps // 10), eval_every=0, log_every=steps,
                        device="cpu", seed=seed)
    model, _ = train_gpt(config, train, corpus, seed=seed, batch_size=16, eval_batches=1)
    model.eval()
    train_batch, _ = lm_batches(corpus, 16, 64, seed + 1, 1)
    val = torch.as_tensor(np.asarray(corpus.val[:64 * windows * 2]).astype(np.int64))
    wins = {t: [val[i * 128:i * 128 + t].unsqueeze(0) for i in range(windows)] for t in (1, 8)}
    ffns = [FFNView(f"blocks.{i}.mlp", b.mlp, b.mlp.up, b.mlp.down)
            for i, b in enumerate(model.blocks)]
    held_out = _held_out_batches(corpus, 8, seed)
    extra = {"calibration": [train_batch(10_000 + i)[0] for i in range(calibration)],
             "eval": held_out}
    note = f"actlab GPT 4 x 128 (FFN 512), GELU, {steps} AdamW steps on stdlib bytes"
    return ModelCase("gpt", model, wins, ffns, False, note), extra


def _held_out_batches(corpus: Any, n: int, seed: int) -> list[tuple[Tensor, Tensor]]:
    """``n`` fixed batches of validation windows (inputs, next-byte targets)."""
    from actlab.data.text import sample_batch

    gen = torch.Generator().manual_seed(seed + 99)
    return [sample_batch(corpus.val, 16, 64, gen) for _ in range(n)]


# ---- quality --------------------------------------------------------------------------------

def gpt_quality(model: nn.Module, held_out: list[tuple[Tensor, Tensor]],
                thresholds: dict[float, dict[str, SiteThresholds]]) -> dict[str, float]:
    """Validation loss (nats) dense and with TEAL at each sparsity."""
    def loss() -> float:
        with torch.no_grad():
            return statistics.fmean(float(model(x, y)[1]) for x, y in held_out)

    out = {"dense_loss": loss()}
    for s, th in thresholds.items():
        with sparse_inference(model, thresholds=th):
            out[f"s{s}_loss"] = loss()
    return out


def minilm_quality(model: nn.Module, inputs: list[dict[str, Tensor]],
                   thresholds: dict[float, dict[str, SiteThresholds]],
                   reference: Tensor | None = None) -> dict[str, float]:
    """Mean cosine of sentence embeddings to the dense model's, with TEAL at each sparsity."""
    from actlab.hf import sentence_embeddings

    dense = sentence_embeddings(model, inputs)
    out: dict[str, float] = {}
    if reference is not None:  # a ReLU model: its activation form is exact
        out["dense_cosine_to_original"] = float(F.cosine_similarity(dense, reference).mean())
        with sparse_inference(model):
            exact = sentence_embeddings(model, inputs)
        out["activation_form_max_abs_diff"] = float((exact - dense).abs().max())
    for s, th in thresholds.items():
        with sparse_inference(model, thresholds=th):
            emb = sentence_embeddings(model, inputs)
        out[f"s{s}_cosine"] = float(F.cosine_similarity(emb, dense).mean())
    return out


def calibrated(model: nn.Module, batches: list[Any], sparsities: Sequence[float]
               ) -> dict[float, dict[str, SiteThresholds]]:
    """TEAL thresholds at each sparsity on ``batches``."""
    return {s: calibrate_thresholds(model, batches, s) for s in sparsities}


# ---- main --------------------------------------------------------------------------------

def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="under two minutes: fewer sparsities, "
                   "repeats and training steps, float32 and one thread only")
    p.add_argument("--threads", default=None, help="comma-separated (default 1,2; quick 1)")
    p.add_argument("--repeats", type=int, default=None, help="timing repeats (default 9; quick 3)")
    p.add_argument("--model-repeats", type=int, default=None,
                   help="timing repeats of the model cases (default 31; quick 9): a forward of "
                        "our GPT is about a millisecond, so noise needs more of them")
    p.add_argument("--windows", type=int, default=None, help="model windows (default 8; quick 2)")
    p.add_argument("--gpt-steps", type=int, default=None, help="default 300; quick 30")
    p.add_argument("--relufy-steps", type=int, default=None, help="default 40; quick 0")
    p.add_argument("--no-minilm", action="store_true", help="leave out the MiniLM cases")
    p.add_argument("--no-llama", action="store_true", help="leave out the LLaMA-7B shape")
    p.add_argument("--no-models", action="store_true",
                   help="leave out the MiniLM and GPT cases and the quality measures")
    p.add_argument("--shape", default=f"{D_MODEL},{HIDDEN}",
                   help="d_model,hidden of the gated FFN (default LLaMA-7B's; smaller for a "
                        "smoke test)")
    p.add_argument("--seed", type=int, default=0)
    return p


def _table(rows: list[dict[str, Any]]) -> None:
    print(f"{'dtype':>8} {'T':>2} {'thr':>3} {'form':>10} {'s':>5} {'speed-up':>8} {'bound':>6} "
          f"{'of bound':>8} {'of copy bw':>10} {'dense ms':>8} {'copy GB/s':>9}")
    for r in rows:
        print(f"{r['dtype']:>8} {r['tokens']:>2} {r['threads']:>3} {r['form']:>10} "
              f"{r['sparsity']:>5.2f} {r['speedup']:>7.2f}x {r['bound']:>5.2f}x "
              f"{r['bound_fraction']:>8.2f} {r['bandwidth_fraction']:>10.2f} "
              f"{r['dense_ms']:>8.1f} {r['copy_bandwidth_gbs']:>9.1f}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; print tables and, last, one JSON line of figures."""
    args = _parser().parse_args(argv)
    for name in ("repeats", "model_repeats", "windows", "gpt_steps", "relufy_steps"):
        value = getattr(args, name)
        if value is not None and value < (0 if name.endswith("steps") else 1):
            print(f"error: --{name.replace('_', '-')} out of range: {value}", file=sys.stderr)
            return 2
    try:
        threads = [int(t) for t in (args.threads or ("1" if args.quick else "1,2")).split(",")]
        d_model, hidden = (int(v) for v in args.shape.split(","))
    except ValueError:
        print("error: --threads and --shape take comma-separated integers, got "
              f"{args.threads!r} and {args.shape!r}", file=sys.stderr)
        return 2
    if min(threads) < 1 or min(d_model, hidden) < 1:
        print("error: --threads and --shape must be positive", file=sys.stderr)
        return 2
    if not sparse_kernel.available():
        print("error: the sparse decode kernel cannot be built here "
              f"({sparse_kernel.native.build_error() or 'no C++ compiler'})", file=sys.stderr)
        return 2
    repeats = args.repeats or (3 if args.quick else 9)
    model_repeats = args.model_repeats or (9 if args.quick else 31)
    windows = args.windows or (2 if args.quick else 8)
    gpt_steps = args.gpt_steps if args.gpt_steps is not None else (30 if args.quick else 300)
    relufy_steps = args.relufy_steps if args.relufy_steps is not None else (0 if args.quick
                                                                            else 40)
    sparsities = (0.5, 0.85) if args.quick else SPARSITIES
    dtypes = (torch.float32,) if args.quick else (torch.float32, torch.bfloat16)
    figures: dict[str, Any] = {"benchmark": "sparse_decode", "quick": args.quick,
                               "llama7b_shape": [d_model, hidden],
                               "threads": threads, "repeats": repeats,
                               "model_repeats": model_repeats,
                               "break_even_table": {f"{str(d)[6:]}_t{t}": v for (d, t), v
                                                    in sparse_kernel.BREAK_EVEN.items()},
                               "break_even_small_table": {f"t{t}": v for t, v
                                                          in sparse_kernel.BREAK_EVEN_SMALL.items()},
                               "small_matrix_bytes": sparse_kernel.SMALL_MATRIX_BYTES}
    llama: list[dict[str, Any]] = []
    for n in [] if args.no_llama else threads:
        torch.set_num_threads(n)
        for dtype in dtypes:
            for tokens in (1, 8):
                llama += llama_rows(dtype, tokens, n, sparsities, repeats, args.seed,
                                    (d_model, hidden))
    figures["copy_bandwidth_gbs"] = {
        str(n): statistics.median(r["copy_bandwidth_gbs"] for r in llama if r["threads"] == n)
        for n in threads if llama}
    if llama:
        print(f"\nllama7b FFN ({d_model} x {hidden}, gated), i.i.d. masks; speed-up = dense / sparse")
        _table(llama)
        first = threads[0]

        def pick(form: str, s: float, **kw: Any) -> dict[str, Any]:
            want = {"dtype": "float32", "tokens": 1, "threads": first, "form": form,
                    "sparsity": s, **kw}
            return next(r for r in llama if all(r[k] == v for k, v in want.items()))

        figures["llama7b_s85_speedup"] = pick("teal", 0.85)["speedup"]
        figures["llama7b_s50_speedup"] = pick("teal", 0.5)["speedup"]
        figures["llama7b_s85_bandwidth_fraction"] = pick("teal", 0.85)["bandwidth_fraction"]
        figures["llama7b_s85_bound_fraction"] = pick("teal", 0.85)["bound_fraction"]
        figures["llama7b_act_s85_speedup"] = pick("activation", 0.85)["speedup"]
        figures["llama7b_act_s85_bound_fraction"] = pick("activation", 0.85)["bound_fraction"]
        figures["llama7b_act_min_bound_fraction"] = min(
            r["bound_fraction"] for r in llama if r["form"] == "activation" and r["tokens"] == 1
            and r["dtype"] == "float32" and r["threads"] == first)
        figures["llama7b_min_speedup_above_30"] = {
            str(n): min(r["speedup"] for r in llama if r["sparsity"] >= 0.3 and r["threads"] == n)
            for n in threads}
        figures["break_even_active_share"] = {
            f"{d}_t{t}_threads{n}": break_even([r for r in llama if r["dtype"] == d and
                                                r["tokens"] == t and r["threads"] == n])
            for d in sorted({r["dtype"] for r in llama}) for t in (1, 8) for n in threads}
    torch.set_num_threads(threads[0])
    cases: list[tuple[ModelCase, dict[str, Any]]] = []
    calibration = 2 if args.quick else 4
    if not (args.no_minilm or args.no_models):
        try:
            cases.append(minilm_cases(windows, relufy_steps, args.seed, calibration,
                                      16 if args.quick else 48))
        except ImportError as err:  # the model package is optional
            print(f"note: MiniLM cases left out ({err})")
    if not args.no_models:
        cases.append(gpt_case(windows, gpt_steps, args.seed, calibration))
    models: list[dict[str, Any]] = []
    quality: dict[str, Any] = {}
    speed_levels = (0.5, 0.85) if args.quick else SPARSITIES
    for case, extra in cases:
        with torch.no_grad():
            levels = sorted(set(speed_levels) | set(QUALITY_SPARSITIES))
            th = calibrated(case.model, extra["calibration"], levels)
        print(f"\n{case.name}: {case.note}")
        rows = model_rows(case, {s: th[s] for s in speed_levels}, model_repeats)
        for r in rows:
            print(f"  T={r['tokens']} {r['form']:>10} s={r['sparsity'] or 0:.2f} "
                  f"tokens/s {r['tokens_per_s_dense']:.0f} -> {r['tokens_per_s_sparse']:.0f} "
                  f"({r['model_speedup']:.2f}x); FFN {r['ffn_speedup']:.2f}x of bound "
                  f"{r['ffn_bound']:.2f}x")
        models += rows
        if case.name == "gpt":
            figures["small_matrix_break_even"] = small_break_even(rows)
            for key, value in (("model", "model_speedup"), ("ffn", "ffn_speedup")):
                figures[f"gpt_min_{key}_speedup_above_30"] = {
                    str(t): min(r[value] for r in rows if r["tokens"] == t
                                and (r["sparsity"] or 0) >= 0.3)
                    for t in sorted({r["tokens"] for r in rows})}
        q_th = {s: th[s] for s in QUALITY_SPARSITIES}
        if case.name == "gpt":
            quality["gpt"] = gpt_quality(case.model, extra["eval"], q_th)
        else:
            original = extra["original"]
            from actlab.hf import sentence_embeddings

            reference = sentence_embeddings(original, extra["eval"])
            quality["minilm-relu"] = minilm_quality(case.model, extra["eval"], q_th, reference)
            with torch.no_grad():
                g_th = calibrated(original, extra["calibration"], QUALITY_SPARSITIES)
            quality["minilm"] = minilm_quality(original, extra["eval"], g_th)
    print("\nquality (TEAL, thresholds calibrated on training data, held-out data):")
    for name, values in quality.items():
        print(f"  {name}: " + ", ".join(f"{k} {v:.4f}" for k, v in values.items()))
    figures.update({"llama7b": llama, "models": models, "quality": quality,
                    "notes": {case.name: case.note for case, _ in cases}})
    print(json.dumps(_rounded(figures)))
    return 0


def _rounded(value: Any) -> Any:
    """Floats to 4 significant digits, so that the JSON line stays readable."""
    if isinstance(value, float):
        return float(f"{value:.4g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


if __name__ == "__main__":
    raise SystemExit(main())
