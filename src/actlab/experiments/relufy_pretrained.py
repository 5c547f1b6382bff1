"""``relufy-pretrained``: ReLUfication of a pretrained model (seed 003 §5, Table 3).

The MLP activation (GELU) of a pretrained Hugging Face model (default all-MiniLM-L6-v2,
offline) is replaced by ReLU with ``actlab.patch_(model, "relu")`` (unbounded sites only, so
BERT's pooler tanh stays). Measured on fixed held-out texts (stdlib docstrings), for the
original, the ReLU swap and the swap after a brief fine-tune: per-layer sparsity (share of
``|a| < 1e-7``), share of negative pre-activations, and the drift of the sentence embedding
(mean-pooled last hidden state, as sentence-transformers pools this model) as its cosine to
the original model's embedding of the same text.

Fine-tuning objective (self-supervised, no labels): *embedding self-distillation*. The
ReLU model learns to reproduce the original model's sentence embeddings of other docstrings
(disjoint from the evaluation texts), with loss ``1 - cos(e_relu(x), e_gelu(x))``; AdamW
via the shared :class:`~actlab.train.loop.Trainer`, dropout on, seeded. The checkpoint has
no masked-language-model head, which rules out MLM without training a new head first.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from actlab.data.text import docstrings
from actlab.errors import ConfigError
from actlab.hf import (
    batched_embeddings,
    encode_each,
    load_hf_model,
    mean_pooled,
    mlp_sites,
    sentence_embeddings,
)
from actlab.plotting import pyplot
from actlab.runner.claims import claim_id
from actlab.runner.experiment import (
    STATUS_DIVERGED,
    Claim,
    Experiment,
    RunContext,
    UnitContext,
    UnitResult,
    register,
)
from actlab.surgery import patch_
from actlab.train.classify import torch_threads
from actlab.train.lm import probe_forward
from actlab.train.loop import TrainConfig, Trainer

SOURCE = "seed 003 §5, Table 3"
STAGES = ("original", "relu", "relu_finetuned")


@dataclass
class RelufyConfig:
    """Model, texts and the brief fine-tune."""

    model_path: str = ""
    n_eval_texts: int = 48
    n_train_texts: int = 256
    max_tokens: int = 64
    steps: int = 100
    batch_size: int = 16
    lr: float = 1e-4
    warmup: int = 10
    threads: int = 1

    def __post_init__(self) -> None:
        for name in ("n_eval_texts", "n_train_texts", "steps", "batch_size"):
            if getattr(self, name) < 1:
                raise ConfigError(name, f"must be >= 1, got {getattr(self, name)}")
        if self.max_tokens < 2:
            raise ConfigError("max_tokens", f"must be >= 2, got {self.max_tokens}")
        if not self.lr > 0:
            raise ConfigError("lr", f"must be > 0, got {self.lr}")
        if self.warmup < 0:
            raise ConfigError("warmup", f"must be >= 0, got {self.warmup}")


@register
class RelufyPretrainedExperiment(Experiment):
    """Sparsity and sentence-embedding drift of a ReLU-swapped pretrained model, before and
    after a brief self-distillation fine-tune."""

    name = "relufy-pretrained"
    headline_figure = "relufy"
    description = ("all-MiniLM-L6-v2 with its GELUs replaced by ReLU: sparsity and sentence-"
                   "embedding cosine to the original, before/after a brief self-distillation.")
    Config = RelufyConfig
    quick = {"n_eval_texts": 24, "n_train_texts": 128, "steps": 40, "batch_size": 8}
    default_seeds = 1
    seeds_per_unit = 1

    def run_unit(self, config: RelufyConfig, unit: dict, seeds: list[int],
                 ctx: UnitContext) -> UnitResult:
        """Measure the three stages for each seed (the seed orders the fine-tuning batches)."""
        result = UnitResult()
        with torch_threads(config.threads or None):
            original, tokenizer = load_hf_model(config.model_path or None)
            texts = docstrings(config.n_eval_texts + config.n_train_texts, min_chars=120)
            if len(texts) < config.n_eval_texts + 2:
                raise ConfigError("n_eval_texts", f"only {len(texts)} docstrings available")
            eval_inputs = encode_each(tokenizer, texts[:config.n_eval_texts], config.max_tokens)
            train_texts = texts[config.n_eval_texts:]
            reference = sentence_embeddings(original, eval_inputs)
            _record(result, "original", seeds[0], original, eval_inputs, reference)
            batch = tokenizer(train_texts, truncation=True, max_length=config.max_tokens,
                              padding="max_length", return_tensors="pt")
            teacher = batched_embeddings(original, batch["input_ids"], batch["attention_mask"])
            for seed in seeds:
                model = copy.deepcopy(original)
                patch_(model, "relu")
                _record(result, "relu", seed, model, eval_inputs, reference)
                status = _self_distill(model, batch["input_ids"], batch["attention_mask"], teacher,
                                       config, seed, ctx)
                model.eval()
                if status != "ok":
                    result.status = STATUS_DIVERGED
                    continue
                _record(result, "relu_finetuned", seed, model, eval_inputs, reference)
        return result

    def summarize(self, config: RelufyConfig, table, results: list[dict],
                  ctx: RunContext) -> dict:
        """Per stage: mean sparsity, negative share, cosine to the original; per layer too."""
        summary: dict = {"objective": "embedding self-distillation, loss 1 - cos(e_relu, e_gelu)",
                         "fine_tune_steps": config.steps, "stages": {}}
        for stage in STAGES:
            rows = table[table.run == stage]
            if rows.empty:
                continue
            layer_rows = rows[rows.layer != ""]
            per_layer = layer_rows.groupby(["metric", "layer"]).value.mean()
            cos = rows[(rows.metric == "cosine_to_original") & (rows.layer == "")].value
            cos_min = rows[(rows.metric == "cosine_min") & (rows.layer == "")].value
            summary["stages"][stage] = {
                "sparsity": float(layer_rows[layer_rows.metric == "sparsity"].value.mean()),
                "preact_neg_frac": float(layer_rows[layer_rows.metric == "preact_neg_frac"].value.mean()),
                "cosine_to_original": float(cos.mean()),
                "cosine_min": float(cos_min.min()),
                "sparsity_per_layer": {k: float(v) for k, v in per_layer.get("sparsity", {}).items()},
                "preact_neg_frac_per_layer": {k: float(v) for k, v in
                                              per_layer.get("preact_neg_frac", {}).items()},
            }
        _figure(summary, ctx)
        return summary

    def claims(self, summary: dict) -> list[Claim]:
        """Table 3's statements, checked on this model."""
        stages = summary["stages"]
        out: list[Claim] = []
        if "relu_finetuned" not in stages:
            return [Claim("fine-tune finished", "diverged", False, SOURCE,
                          id=claim_id(self.name, "model", "fine-tune-finished"))]
        tuned, swap = stages["relu_finetuned"], stages["relu"]
        out.append(Claim("ReLUfication yields 55-74% post-activation sparsity",
                         f"{tuned['sparsity']:.3f} after fine-tune ({swap['sparsity']:.3f} at swap)",
                         bool(0.55 <= tuned["sparsity"] <= 0.74), SOURCE,
                         id=claim_id(self.name, "model", "sparsity-in-published-range"),
                         value=tuned["sparsity"], comparison="compound", threshold=0.55))
        gap = abs(tuned["sparsity"] - tuned["preact_neg_frac"])
        out.append(Claim("the resulting sparsity closely matches the share of negative "
                         "pre-activations (within 0.02)", f"|difference| {gap:.4f}",
                         bool(gap <= 0.02), SOURCE,
                         id=claim_id(self.name, "model", "sparsity-matches-negative-share"),
                         value=gap, comparison="<=", threshold=0.02))
        change = tuned["preact_neg_frac"] - stages["original"]["preact_neg_frac"]
        out.append(Claim("the share of negative pre-activations changes little after conversion "
                         "(within 0.05)", f"{change:+.4f}", bool(abs(change) <= 0.05), SOURCE,
                         id=claim_id(self.name, "model", "negative-share-changes-little"),
                         value=change, comparison="within", threshold=0.05, reference=0.0))
        out.append(Claim("a brief fine-tune recovers the original embedding (cosine rises)",
                         f"cosine {swap['cosine_to_original']:.4f} -> {tuned['cosine_to_original']:.4f}",
                         bool(tuned["cosine_to_original"] > swap["cosine_to_original"]), SOURCE,
                         id=claim_id(self.name, "model", "fine-tune-recovers-embedding"),
                         value=tuned["cosine_to_original"], comparison=">",
                         threshold=swap["cosine_to_original"]))
        return out


def _record(result: UnitResult, stage: str, seed: int, model, inputs, reference) -> None:
    sites = list(mlp_sites(model))
    table = probe_forward(model, inputs, metrics=("sparsity", "preact_neg_frac"),
                          activations=sites)
    for row in table.itertuples():
        result.add(stage, seed, 0, str(sites.index(row.layer)), row.metric, row.value)
    cosine = F.cosine_similarity(sentence_embeddings(model, inputs), reference, dim=-1)
    result.add(stage, seed, 0, "", "cosine_to_original", float(cosine.mean()))
    result.add(stage, seed, 0, "", "cosine_min", float(cosine.min()))


def _self_distill(model, input_ids, mask, teacher, config: RelufyConfig, seed: int,
                  ctx: UnitContext) -> str:
    """Fine-tune ``model`` so its mean-pooled embeddings match ``teacher`` (cosine loss)."""
    n = input_ids.shape[0]

    def train_batch(step: int):
        generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
        index = torch.randint(0, n, (min(config.batch_size, n),), generator=generator)
        return input_ids[index], mask[index], teacher[index]

    def loss_fn(net, batch):
        ids, attention, target = batch
        embedding = mean_pooled(net(input_ids=ids, attention_mask=attention).last_hidden_state,
                                attention)
        return (1 - F.cosine_similarity(embedding, target, dim=-1)).mean()

    train_config = TrainConfig(steps=config.steps, lr=config.lr, warmup=config.warmup,
                               weight_decay=0.01, eval_every=0, log_every=10, beta2=0.999)
    with torch.random.fork_rng():
        torch.manual_seed(seed)  # dropout masks
        outcome = Trainer(model, train_config, train_batch, loss_fn=loss_fn,
                          progress=ctx.progress).fit()
    return outcome.status


def _figure(summary: dict, ctx: RunContext) -> None:
    plt = pyplot()

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    for stage, s in summary["stages"].items():
        layers = sorted(s["sparsity_per_layer"], key=int)
        left.plot([int(k) for k in layers], [s["sparsity_per_layer"][k] for k in layers],
                  marker="o", label=f"{stage} sparsity")
        left.plot([int(k) for k in layers], [s["preact_neg_frac_per_layer"][k] for k in layers],
                  ls=":", label=f"{stage} negative share")
    left.set(xlabel="layer", ylabel="share", ylim=(-0.02, 1.02))
    left.legend(fontsize=6)
    names = list(summary["stages"])
    right.bar(range(len(names)), [summary["stages"][k]["cosine_to_original"] for k in names])
    right.set_xticks(range(len(names)), names)
    values = [summary["stages"][k]["cosine_to_original"] for k in names]
    right.set(ylabel="cosine to original embedding", ylim=(min(0.9, np.nanmin(values) - 0.02), 1.0))
    fig.tight_layout()
    ctx.save_figure(fig, "relufy")
