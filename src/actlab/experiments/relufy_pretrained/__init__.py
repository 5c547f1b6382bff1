"""``relufy-pretrained``: ReLUfication of a pretrained model ("Bug or Feature²", long version,
§5, Table 3).

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

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from actlab.data.text import docstrings
from actlab.errors import ConfigError
from actlab.experiments.relufy_pretrained.claims import claims
from actlab.experiments.relufy_pretrained.figures import draw
from actlab.experiments.relufy_pretrained.summary import build_summary
from actlab.hf import (
    batched_embeddings,
    encode_each,
    load_hf_model,
    mean_pooled,
    mlp_sites,
    sentence_embeddings,
)
from actlab.recipes.language_model import probe_forward
from actlab.runner.experiment import (
    STATUS_DIVERGED,
    Claim,
    Experiment,
    RunContext,
    UnitContext,
    UnitResult,
    register,
)
from actlab.runner.fields import CheckedConfig, checked
from actlab.surgery import patch_
from actlab.train.loop import TrainConfig, Trainer
from actlab.train.supervised import torch_threads


@dataclass
class RelufyConfig(CheckedConfig):
    """Model, texts and the brief fine-tune."""

    model_path: str = ""
    n_eval_texts: int = checked(48, ge=1)
    n_train_texts: int = checked(256, ge=1)
    max_tokens: int = checked(64, ge=2)
    steps: int = checked(100, ge=1)
    batch_size: int = checked(16, ge=1)
    lr: float = checked(1e-4, gt=0)
    warmup: int = checked(10, ge=0)
    threads: int = 1


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
        summary = build_summary(config, table)
        if ctx.draw:  # the run's figures; not redrawn for each seed alone
            draw(summary, ctx)
        return summary

    def claims(self, summary: dict) -> list[Claim]:
        """Table 3's statements, checked on this model."""
        return claims(summary)


def _record(result: UnitResult, stage: str, seed: int, model: nn.Module, inputs: list,
            reference: Tensor) -> None:
    """Per-layer sparsity and negative share at the MLP sites; embedding cosine to the original."""
    sites = list(mlp_sites(model))
    table = probe_forward(model, inputs, metrics=("sparsity", "preact_neg_frac"),
                          activations=sites)
    for row in table.itertuples():
        result.add(stage, seed, 0, str(sites.index(row.layer)), row.metric, row.value)
    cosine = F.cosine_similarity(sentence_embeddings(model, inputs), reference, dim=-1)
    result.add(stage, seed, 0, "", "cosine_to_original", float(cosine.mean()))
    result.add(stage, seed, 0, "", "cosine_min", float(cosine.min()))


def _self_distill(model: nn.Module, input_ids: Tensor, mask: Tensor, teacher: Tensor,
                  config: RelufyConfig, seed: int, ctx: UnitContext) -> str:
    """Fine-tune ``model`` so its mean-pooled embeddings match ``teacher`` (cosine loss)."""
    n = input_ids.shape[0]

    def train_batch(step: int) -> tuple[Tensor, Tensor, Tensor]:
        generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
        index = torch.randint(0, n, (min(config.batch_size, n),), generator=generator)
        return input_ids[index], mask[index], teacher[index]

    def loss_fn(net: nn.Module, batch: tuple[Tensor, Tensor, Tensor]) -> Tensor:
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

