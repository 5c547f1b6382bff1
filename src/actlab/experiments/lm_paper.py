"""The language-model experiments at the papers' settings (``--paper``) and what a GPT costs
(``actlab plan``).

Two recipes, each defined once:

* :data:`GPT2_SMALL` -- "Rethinking Activation Functions" §4.3 trains GPT-2 Small
  "Following Karpathy's training setup (Karpathy, 2022)" on "the full OpenWebText corpus" for
  300,000 steps: the model and training of nanoGPT's ``train.py`` defaults ("designed to train a
  gpt2 (124M) on OpenWebText") and ``config/train_gpt2.py``, read from the karpathy/nanoGPT
  repository, at the paper's length (``lm-shift``);
* :data:`GPT_NANO` -- "Bug or Feature²" App. D.6's GPT-nano (124M) on FineWeb with Muon and
  AdamW (``spikes``, ``lm-drift``); its learning rate and clipping are not in the paper and
  come from its released code, as :mod:`actlab.recipes.language_model` records.

Both read GPT-2 BPE token shards (:mod:`actlab.data.shards`): nanoGPT's ``train.bin`` /
``val.bin`` (``data/openwebtext/prepare.py``) or modded-nanogpt's headed FineWeb shards.
There is no gradient accumulation in actlab's engine: the global batch is split across
``--nproc`` ranks and each rank computes its share at once (``actlab plan`` shows the memory
that takes).
"""

from __future__ import annotations

from typing import Any

from actlab.recipes.language_model import (
    GPT_NANO_GRAD_CLIP,
    GPT_NANO_LR,
    PAPER_EVAL_EVERY,
    PAPER_ITERATIONS,
    PAPER_WARMDOWN,
    PAPER_WARMUP,
)
from actlab.runner.cost import Workload
from actlab.runner.paper import DataNeed, PaperPreset, code, doc, ours

RETHINKING = "Rethinking Activation Functions"
BUG_OR_FEATURE = "Bug or Feature²"
NANOGPT = "karpathy/nanoGPT train.py"
NANOGPT_CONFIG = "karpathy/nanoGPT config/train_gpt2.py"
RELEASED = "the released code of Bug or Feature² (configs/config.yaml), not stated in the paper"

SHARDS = ("a folder of GPT-2 BPE token shards (actlab.data.shards): uint16 .bin files whose "
          "names contain train and val, raw as nanoGPT's data/openwebtext/prepare.py writes "
          "them or headed as modded-nanogpt's fineweb_train_*.bin")

OPENWEBTEXT = DataNeed(what="OpenWebText", source=f"{RETHINKING} §4.3 'the full OpenWebText "
                                                  f"corpus'", format=SHARDS, prefix="shards:")
FINEWEB = DataNeed(what="FineWeb", source=f"{BUG_OR_FEATURE} App. D.6", format=SHARDS,
                   prefix="shards:")

GPT2_SMALL = PaperPreset({
    "n_layer": code(NANOGPT, 12, "GPT-2 Small, the model of §4.3"),
    "n_head": code(NANOGPT, 12),
    "n_embd": code(NANOGPT, 768),
    "vocab_size": code(NANOGPT, 50304, "GPT-2's 50,257 tokens 'rounded up for efficiency'"),
    "block_size": code(NANOGPT, 1024),
    "bias": code(NANOGPT, False),
    "init_std": code("karpathy/nanoGPT model.py", 0.02),
    "activations": code("karpathy/nanoGPT model.py", ["gelu"],
                        "nn.GELU(); ReLU is our extension: --set activations=gelu,relu"),
    "optimizer": code(NANOGPT, "adamw"),
    "lr": code(NANOGPT, 6e-4, "learning_rate; min_lr 6e-5 is the engine's floor of 0.1"),
    "beta1": code(NANOGPT, 0.9),
    "beta2": code(NANOGPT, 0.95),
    "weight_decay": code(NANOGPT_CONFIG, 0.1),
    "grad_clip": code(NANOGPT, 1.0),
    "schedule": code(NANOGPT, "cosine", "warm-up, then cosine decay to min_lr"),
    "warmup": code(NANOGPT, 2000, "warmup_iters"),
    "batch_size": code(NANOGPT_CONFIG, 480, "12 sequences x 5 accumulation steps x 8 GPUs = "
                                          "491,520 tokens"),
    "steps": doc(RETHINKING, "§4.3", 300_000, "'300,000 optimization steps'; the cosine "
                 "ends there (ours: nanoGPT decays over lr_decay_iters = 600,000)"),
    "eval_every": code(NANOGPT_CONFIG, 1000, "eval_interval"),
    "eval_batches": code(NANOGPT_CONFIG, 5, "eval_iters = 200 micro-batches of 12 sequences"),
    "dtype": code(NANOGPT, "bfloat16", "autocast where the GPU supports it"),
    "probe_every": ours(1000, "the hidden-state trajectory at every evaluation"),
}, data=OPENWEBTEXT)

GPT_NANO = PaperPreset({
    "model": doc(BUG_OR_FEATURE, "App. D.6", "gpt-nano", "12 layers, 12 heads, width 768, "
                 "vocabulary 50,257, sequence length 2,048 (124M parameters)"),
    "optimizer": doc(BUG_OR_FEATURE, "App. D.6", "muon", "'Muon optimizer for linear layers "
                                                        "and Adam for all other parameters'"),
    "batch_size": doc(BUG_OR_FEATURE, "App. D.6", 256, "batch size 16 x 16 gradient "
                                                       "accumulation steps"),
    "steps": doc(BUG_OR_FEATURE, "App. D.6", PAPER_ITERATIONS, "'7,168 effective iterations'"),
    "beta1": doc(BUG_OR_FEATURE, "App. D.6", 0.9, "betas [0.9, 0.95]"),
    "beta2": doc(BUG_OR_FEATURE, "App. D.6", 0.95, "betas [0.9, 0.95]"),
    "weight_decay": doc(BUG_OR_FEATURE, "App. D.6", 0.0, "'zero weight decay'"),
    "schedule": doc(BUG_OR_FEATURE, "App. D.6", "trapezoid", "'2,000 warmup and 2,028 "
                    "warmdown iterations': linear up, constant, linear down (our reading)"),
    "warmup": doc(BUG_OR_FEATURE, "App. D.6", PAPER_WARMUP, "'2,000 warmup'"),
    "warmdown": doc(BUG_OR_FEATURE, "App. D.6", PAPER_WARMDOWN, "'2,028 warmdown iterations'"),
    "eval_every": doc(BUG_OR_FEATURE, "App. D.6", PAPER_EVAL_EVERY, "'every 1,024 iterations'"),
    "eval_batches": doc(BUG_OR_FEATURE, "App. D.6", 2, "'1,048,576 tokens' = 2 batches of "
                                                       "256 x 2,048"),
    "lr": code(RELEASED, GPT_NANO_LR, "AdamW; Muon at 0.1 of it"),
    "grad_clip": code(RELEASED, GPT_NANO_GRAD_CLIP),
    "dtype": ours("bfloat16", "D.6 states no precision; App. D.1's other runs use bfloat16 "
                              "mixed precision"),
}, data=FINEWEB)


def gpt_workloads(config: Any, *, activation: str, optimizer: str | None = None,
                  norm: str | None = None, probe_batches: int = 0, probe_every: int = 0,
                  models: int = 1) -> list[Workload]:
    """The GPT one seed of a language-model unit trains, with the recipe's validation
    (``eval_batches`` batches every ``eval_every`` steps) and the experiment's probe
    (``probe_batches`` batches every ``probe_every`` steps) priced as forward passes."""
    from torch import zeros

    from actlab.nn.gpt import GPT

    overrides = {"activation": activation, **({"norm": norm} if norm else {})}
    model_config = config.model_config(**overrides)
    recipe = config.recipe()
    evals = config.steps // max(1, recipe["eval_every"]) + 1
    probes = config.steps // probe_every + 1 if probe_every else 0
    eval_samples = (evals * config.eval_batches + probes * probe_batches) * config.batch_size

    def build() -> GPT:
        return GPT(model_config)

    def example(n: int) -> tuple:
        idx = zeros(n, model_config.block_size, dtype=int)
        return idx, idx

    return [Workload(f"gpt {model_config.n_layer}x{model_config.n_embd}", build, example,
                     config.steps, config.batch_size, optimizer or config.optimizer,
                     models=models, eval_samples=eval_samples,
                     sample=f"sequence of {model_config.block_size} tokens",
                     call=lambda model, idx, targets: model(idx, targets=targets))]
