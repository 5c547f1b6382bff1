"""Train a GPT on a byte-level text corpus (or token shards), in one process or data-parallel
under torchrun.

The recipe of the language-model experiments (``lm-shift``, ``spikes``, ``gated-ffn``)::

    from actlab.recipes.language_model import LMScale, lm_batches, probe_forward, train_gpt

    scale = LMScale(n_layer=2, n_embd=64, block_size=64, batch_size=16, steps=300)
    corpus = scale.corpus()                       # the stdlib's .py sources, as bytes
    model, result = train_gpt(scale.model_config(activation="relu"), scale.train_config(),
                              corpus, seed=0, batch_size=scale.batch_size)
    inputs = [x for x, _ in lm_batches(corpus, 16, 64, seed=0)[1]()]
    table = probe_forward(model, inputs, metrics=("act_mean",), blocks=model.blocks)

* :class:`LMScale`: the model, data and optimisation fields an experiment config inherits,
  turned into a :class:`~actlab.nn.gpt.GPTConfig` and a :class:`~actlab.train.loop.TrainConfig`;
  by default the gpt-nano recipe of "Bug or Feature²" App. D.6 (Muon + AdamW, trapezoidal
  schedule, evaluation every 1/7 of training), ``--set model=gpt-nano`` the paper's model;
* :func:`lm_batches`: training batches as a pure function of ``(seed, step)``, validation
  batches fixed for every seed;
* :func:`train_gpt`: build (or take) a GPT and fit it with the shared ``Trainer``;
* :func:`probe_forward`: probe metrics on evaluation passes (``actlab.measure_once``);
* :func:`seeded_gpt`, :func:`probe_windows`, :func:`train_and_record`: the per-seed steps of
  an experiment unit (model on the unit's device, probe inputs, losses into the unit's table).

Command line::

    python -m actlab.recipes.language_model --steps 200 --n-layer 2 --n-embd 64 --out runs/lm
    torchrun --nproc_per_node 2 -m actlab.recipes.language_model --steps 200 --batch-size 32 --out runs/lm

``--batch-size`` is the *global* batch: each of N processes takes ``batch/N`` rows of the
same global batch, so the run computes the same updates whatever N is (up to float
rounding). Rank 0 prints progress and writes ``history.json`` and ``last.safetensors`` to
``--out``; ``--resume`` continues from that checkpoint.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from actlab.config import CheckedConfig, checked
from actlab.data.text import (
    BYTE_VOCAB,
    TextCorpus,
    check_corpus_source,
    is_shards,
    load_corpus,
    sample_batch,
)
from actlab.device import place, resolve_device, to_unit_device
from actlab.errors import ConfigError, renamed_keywords
from actlab.nn.gpt import GPT, GPTConfig
from actlab.probe.forward import default_forward
from actlab.recipes.unit import STATUS_DIVERGED, UnitContext, UnitResult
from actlab.train.distributed import DistInfo, cleanup, init_distributed, wrap_model
from actlab.train.loop import STATUS_OK, Batch, TrainConfig, Trainer, TrainResult
from actlab.train.muon import MUON
from actlab.train.optim import TRAINER_OPTIMIZERS

EVAL_SEED = 2024  # validation windows are the same for every run and seed
COMPILE_CHOICES = ("auto", "on", "off")

# "Bug or Feature²" App. D.6: 7,168 iterations, 2,000 of warm-up, 2,028 of warm-down, test
# evaluation every 1,024. The gpt-nano recipe keeps these fractions of any ``steps``.
PAPER_ITERATIONS = 7168
PAPER_WARMUP = 2000
PAPER_WARMDOWN = 2028
PAPER_EVAL_EVERY = 1024
# Not stated in the paper; from its released code (configs/config.yaml and the model's
# optimizer set-up): AdamW at 0.005 on the embedding, head and non-matrix parameters (Muon's
# 0.1 x that rate is ``muon_lr_ratio``'s default), and no gradient clipping.
GPT_NANO_LR = 0.005
GPT_NANO_GRAD_CLIP = 0.0
GPT_NANO_WEIGHT_DECAY = 0.0  # the paper's "zero weight decay"
# The paper's model (App. D.6: 12 layers, 12 heads, width 768, vocabulary 50,257) at its
# sequence length 2,048; ``model="custom"`` keeps the shape fields as they are set.
MODELS: dict[str, dict[str, int]] = {
    "custom": {},
    "gpt-nano": {"n_layer": 12, "n_head": 12, "n_embd": 768, "vocab_size": 50_257,
                 "block_size": 2048},
}
_TRAIN_DEFAULTS = {f.name: f.default for f in dataclasses.fields(TrainConfig)}


def paper_fraction(steps: int, part: int) -> int:
    """``steps * part / 7168`` rounded to the nearest integer (halves up), the share of a
    run of ``steps`` that ``part`` of the paper's 7,168 iterations is."""
    return (steps * part + PAPER_ITERATIONS // 2) // PAPER_ITERATIONS


def lm_batches(corpus: TextCorpus, batch_size: int, block_size: int, seed: int,
               eval_batches: int = 8) -> tuple[Callable[[int], Batch], Callable[[], list[Batch]]]:
    """``(train_batch, eval_batches)`` for :class:`~actlab.train.loop.Trainer`.

    Training batch ``step`` is drawn with a generator seeded from ``(seed, step)``, so it is
    a pure function of both (resumable, shared by paired conditions of one seed). The
    ``eval_batches`` validation batches are fixed for all seeds (``EVAL_SEED``).
    """
    if batch_size < 1 or block_size < 1:
        raise ValueError(f"batch_size and block_size must be >= 1, got {batch_size}, {block_size}")

    def train_batch(step: int) -> Batch:
        generator = torch.Generator().manual_seed(int(seed) * 1_000_003 + int(step))
        return sample_batch(corpus.train, batch_size, block_size, generator)

    cached: list[Batch] = []

    def validation() -> list[Batch]:
        if not cached:
            generator = torch.Generator().manual_seed(EVAL_SEED)
            cached.extend(sample_batch(corpus.val, batch_size, block_size, generator)
                          for _ in range(eval_batches))
        return cached

    return train_batch, validation


def train_gpt(model_config: GPTConfig, train_config: TrainConfig, corpus: TextCorpus, *,
              seed: int = 0, batch_size: int = 32, eval_batches: int = 8,
              model: nn.Module | None = None, dist: DistInfo | None = None,
              checkpoint_dir: str | Path | None = None,
              on_step: Callable[[int, float], None] | None = None,
              progress: Callable[..., Iterable] | None = None,
              resume: bool = False) -> tuple[nn.Module, TrainResult]:
    """Build (or take) a GPT, train it on ``corpus`` and return ``(model, result)``.

    ``seed`` seeds the initialisation and the batch order. ``model`` lets the caller attach
    probes before training (it must match ``model_config``). Under DDP the returned model is
    the unwrapped module.
    """
    dist = dist or DistInfo(device=resolve_device(train_config.device))
    if model is None:
        model = GPT(model_config, seed=seed)
    model = model.to(dist.device)
    if train_config.dtype == "float64":
        model = model.to(dtype=torch.float64)  # before DDP builds its gradient buckets
    train_batch, validation = lm_batches(corpus, batch_size, model_config.block_size, seed,
                                         eval_batches)
    trainer = Trainer(wrap_model(model, dist), train_config, train_batch, validation, dist=dist,
                      checkpoint_dir=checkpoint_dir, on_step=on_step, progress=progress)
    result = trainer.fit(resume=resume)
    return model, result


@dataclass
class LMScale(CheckedConfig):
    """Model, data and optimisation fields shared by the language-model experiments.

    Experiment configs subclass it, so every field can be overridden from the command line
    (``actlab run lm-shift --set n_layer=6``). ``data`` is ``"stdlib"``, a text path, or
    ``"shards:DIR"`` (uint16 token shards, :mod:`actlab.data.shards`). ``model="gpt-nano"``
    sets ``n_layer``, ``n_head``, ``n_embd``, ``vocab_size`` and ``block_size`` to the paper's
    (:data:`MODELS`, over any other value of theirs). ``positions``, ``norm`` and ``bias``
    choose the released code's architecture where it differs from nanoGPT's (``rotary``,
    ``rmsnorm``, ``False``). The model and training fields are checked by the configs they
    build.

    The training fields left ``None`` take the recipe's value (:meth:`recipe`): with
    ``optimizer="muon"`` (the default) the gpt-nano recipe of "Bug or Feature²" App. D.6 --
    AdamW at ``GPT_NANO_LR`` and Muon at ``muon_lr_ratio`` of it, no weight decay, no clipping,
    the trapezoidal schedule with the paper's warm-up and warm-down fractions
    (2,000/7,168 and 2,028/7,168 of ``steps``) and evaluation every 1,024/7,168 of ``steps``;
    with any other optimizer :class:`~actlab.train.loop.TrainConfig`'s values (AdamW 1e-3,
    100 warm-up steps, cosine to 0.1, weight decay 0.1, clipping at 1, evaluation every 100
    steps), the recipe of the references measured before gpt-nano. The warm-up and warm-down
    follow the schedule: the paper's fractions under ``trapezoid``, else 100 and 0.
    """

    data: str = "stdlib"
    model: str = checked("custom", choices=tuple(MODELS))
    vocab_size: int = BYTE_VOCAB
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    block_size: int = 128
    mlp_ratio: float = 4.0
    norm: str = "layernorm"
    positions: str = "learned"
    bias: bool = True
    batch_size: int = checked(32, ge=1)
    steps: int = 2000
    optimizer: str = checked(MUON, choices=TRAINER_OPTIMIZERS)
    lr: float | None = None
    beta1: float = 0.9
    beta2: float = 0.95
    muon_lr_ratio: float = 0.1
    muon_momentum: float = 0.95
    muon_ns_steps: int = 5
    muon_weight_decay: float | None = None
    muon_ns_dtype: str = "auto"
    warmup: int | None = None
    warmdown: int | None = None
    schedule: str | None = None
    weight_decay: float | None = None
    grad_clip: float | None = None
    eval_every: int | None = None
    eval_batches: int = checked(8, ge=1)
    log_every: int = 10
    dtype: str = "float32"
    threads: int = checked(1, ge=0)  # 0: torch's default
    # torch.compile for training: "auto" compiles on CUDA only (a compile costs ~20 s, which
    # pays off over thousands of GPU steps, not on the CPU); "on" / "off" force it.
    compile_model: str = checked("auto", choices=COMPILE_CHOICES)

    def __post_init__(self) -> None:
        for name, value in MODELS.get(self.model, {}).items():
            setattr(self, name, value)  # the preset's shape (an unknown name fails the check)
        super().__post_init__()

    def check(self) -> None:
        """The model and training configs build (their ``ConfigError`` names the bad field)."""
        if not is_shards(self.data) and self.vocab_size < BYTE_VOCAB:
            raise ConfigError("vocab_size", f"byte-level text needs >= {BYTE_VOCAB}, got "
                                            f"{self.vocab_size}")
        try:  # before any unit runs, not inside each
            check_corpus_source(self.data)
        except (OSError, ValueError) as exc:
            raise ConfigError("data", str(exc)) from None
        self.model_config()
        self.train_config()

    def model_config(self, **overrides: Any) -> GPTConfig:
        """The :class:`GPTConfig` of these fields, with ``overrides`` (e.g. ``activation``)."""
        return config_from(GPTConfig, self, overrides)

    def recipe(self) -> dict[str, Any]:
        """The training values of the fields left ``None`` and of those set (class docstring)."""
        gpt_nano = self.optimizer == MUON
        schedule = self.schedule or ("trapezoid" if gpt_nano else _TRAIN_DEFAULTS["schedule"])
        trapezoid = schedule == "trapezoid"
        chosen = {
            "schedule": schedule,
            "lr": GPT_NANO_LR if gpt_nano else _TRAIN_DEFAULTS["lr"],
            "weight_decay": GPT_NANO_WEIGHT_DECAY if gpt_nano else _TRAIN_DEFAULTS["weight_decay"],
            "grad_clip": GPT_NANO_GRAD_CLIP if gpt_nano else _TRAIN_DEFAULTS["grad_clip"],
            "warmup": (paper_fraction(self.steps, PAPER_WARMUP) if trapezoid
                       else _TRAIN_DEFAULTS["warmup"]),
            "warmdown": paper_fraction(self.steps, PAPER_WARMDOWN) if trapezoid else 0,
            "eval_every": (max(1, paper_fraction(self.steps, PAPER_EVAL_EVERY)) if gpt_nano
                           else _TRAIN_DEFAULTS["eval_every"]),
        }
        return {name: chosen[name] if getattr(self, name) is None else getattr(self, name)
                for name in chosen}

    def train_config(self, **overrides: Any) -> TrainConfig:
        """The :class:`TrainConfig` of these fields and :meth:`recipe`, with ``overrides``;
        ``compile`` follows ``compile_model`` on the unit's device."""
        return config_from(TrainConfig, self, {**self.recipe(), "compile": self.compiles(),
                                               **(overrides or {})})

    def compiles(self, device: str | torch.device | None = None) -> bool:
        """Whether training compiles the model on ``device`` (default: the unit's)."""
        if self.compile_model == "auto":
            return resolve_device(device).type == "cuda"
        return self.compile_model == "on"

    def corpus(self) -> TextCorpus:
        """The corpus named by ``data`` (shards: every token id checked below ``vocab_size``)."""
        return load_corpus(self.data, vocab_size=self.vocab_size)


def config_from(kind: type, source: Any, overrides: dict[str, Any] | None = None) -> Any:
    """A ``kind`` dataclass from the attributes of ``source`` named like its fields.

    Fields ``source`` lacks keep their defaults; ``overrides`` win over both.
    """
    names = {f.name for f in dataclasses.fields(kind)}
    values = {k: getattr(source, k) for k in names if hasattr(source, k)}
    return kind(**{**values, **(overrides or {})})


@renamed_keywords(inputs="batches", modules="input_modules")
def probe_forward(model: nn.Module, batches: Iterable[Any], *, metrics: Sequence[str],
                  blocks: Iterable[nn.Module | str] | None = None, activations: Any = None,
                  input_modules: Iterable[nn.Module | str] | None = None,
                  eps: float = 1e-7, forward: Callable[[Any], Any] | None = None) -> Any:
    """Measure ``metrics`` on evaluation passes over ``batches`` (:func:`actlab.measure_once`;
    ``input_modules``: those whose input the ``input`` metrics read; the old keyword names
    ``inputs=`` and ``modules=`` still work for one release, with a ``DeprecationWarning``).

    The model runs in eval mode without gradients (its previous mode is restored), so
    running statistics (percentile norms) are not touched. ``forward(item)`` defaults to
    ``model(item)`` with the item's tensors on the model's device (a dict as keywords).
    Returns the tidy frame (layer, metric, value), all passes pooled.
    """
    from actlab.probe.measure import measure_once

    return measure_once(model, batches, metrics=metrics, activations=activations, blocks=blocks,
                        input_modules=input_modules, eps=eps,
                        forward=forward or partial(default_forward, model), eval_mode=True)


# ------------------------------------------------------------------ an experiment unit's steps
def seeded_gpt(model_config: GPTConfig, seed: int, ctx: UnitContext) -> GPT:
    """A GPT initialised from ``seed`` on the unit's device."""
    return place(GPT(model_config, seed=seed), ctx.device)


def probe_windows(config: LMScale, corpus: TextCorpus, seed: int, n_batches: int,
                  ctx: UnitContext) -> list[Tensor]:
    """Inputs of ``n_batches`` fixed validation batches (the same for every seed), on device."""
    _, validation = lm_batches(corpus, config.batch_size, config.block_size, seed, n_batches)
    return [to_unit_device(x, device=ctx.device) for x, _ in validation()]


def train_and_record(config: LMScale, model: GPT, corpus: TextCorpus, seed: int,
                     ctx: UnitContext, result: UnitResult, run: str, *,
                     losses: Sequence[str] = ("val_loss",),
                     on_step: Callable[[int, float], None] | None = None) -> TrainResult:
    """Train ``model`` with the scale's settings and record its ``losses`` under ``run``.

    Rows ``(run, seed, step, "", key, value)`` follow the training history in order. A run
    that stopped on a non-finite loss sets the unit's status to diverged (never raised).
    Under ``--nproc N`` (``ctx.dist``) the model trains data-parallel: every rank draws the
    same global batch and keeps its rows (:func:`actlab.train.distributed.shard`), so the
    history is that of one process on the global batch.
    """
    _, outcome = train_gpt(model.config, config.train_config(), corpus, seed=seed,
                           batch_size=config.batch_size, eval_batches=config.eval_batches,
                           model=model, on_step=on_step, progress=ctx.progress, dist=ctx.dist)
    for record in outcome.history:
        for key in losses:
            if key in record:
                result.add(run, seed, record["step"], "", key, record[key])
    # whether the model trained compiled, and the first update's time (holding the compile)
    result.add(run, seed, 0, "", "compiled", float(config.compiles()))
    result.add(run, seed, 0, "", "first_step_s", outcome.first_step_s)
    if outcome.status != STATUS_OK:
        result.status = STATUS_DIVERGED
    return outcome


# ------------------------------------------------------------------------------ command line
def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m actlab.recipes.language_model",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--data", default="stdlib",
                        help="'stdlib', a text file / folder, or 'shards:DIR'")
    parser.add_argument("--out", default=None, help="folder for history.json and the checkpoint")
    parser.add_argument("--resume", action="store_true", help="continue from --out/last.safetensors")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=32, help="global batch (all processes)")
    parser.add_argument("--eval-batches", type=int, default=8)
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    for name, kind, default in (("block-size", int, 128), ("n-layer", int, 4), ("n-head", int, 4),
                                ("n-embd", int, 128), ("mlp-ratio", float, 4.0),
                                ("activation", str, "gelu"), ("ffn", str, "plain"),
                                ("norm", str, "layernorm"), ("dropout", float, 0.0),
                                ("positions", str, "learned"), ("vocab-size", int, 256)):
        parser.add_argument(f"--{name}", type=kind, default=default)
    for name, kind, default in (("steps", int, 1000), ("optimizer", str, "adamw"),
                                ("lr", float, 1e-3), ("warmup", int, 100), ("warmdown", int, 0),
                                ("schedule", str, "cosine"), ("min-lr-ratio", float, 0.1),
                                ("weight-decay", float, 0.1), ("grad-clip", float, 1.0),
                                ("eval-every", int, 100), ("log-every", int, 10),
                                ("checkpoint-every", int, 0), ("dtype", str, "float32")):
        parser.add_argument(f"--{name}", type=kind, default=default)
    parser.add_argument("--compile", action="store_true", help="torch.compile the model")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point (see the module docstring)."""
    args = _parser().parse_args(argv)
    # The options are named like the config fields (``--n-layer`` -> ``n_layer``).
    model_config = config_from(GPTConfig, args)
    train_config = config_from(TrainConfig, args)
    dist = init_distributed(args.device)
    try:
        corpus = load_corpus(args.data, vocab_size=args.vocab_size)
        if dist.is_main:
            print(f"{corpus}; world size {dist.world_size} on {dist.device}", flush=True)

        def report(step: int, loss: float) -> None:
            if dist.is_main and (step % args.log_every == 0 or step == args.steps):
                print(f"step {step:6d}  train loss {loss:.4f}", flush=True)

        model, result = train_gpt(model_config, train_config, corpus, seed=args.seed,
                                  batch_size=args.batch_size, eval_batches=args.eval_batches,
                                  dist=dist, checkpoint_dir=args.out, on_step=report,
                                  resume=args.resume)
        if dist.is_main:
            print(f"{result.status} after {result.step} steps; val loss {result.final_val_loss:.4f}",
                  flush=True)
            if args.out:
                Path(args.out).mkdir(parents=True, exist_ok=True)
                (Path(args.out) / "history.json").write_text(json.dumps(result.history, indent=1))
        return 0 if result.status == "ok" else 1
    finally:
        cleanup()


if __name__ == "__main__":
    sys.exit(main())
