"""The language-model recipe on its own: batches against direct slicing of the corpus,
``train_gpt`` against an independent plain loop (PyTorch's AdamW, our own schedule, batches
and cross-entropy), ``probe_forward`` against forward hooks, and ``LMScale``'s checks."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from actlab.data.text import TextCorpus
from actlab.errors import ConfigError
from actlab.nn.gpt import GPT, GPTConfig
from actlab.recipes.language_model import (
    EVAL_SEED,
    LMScale,
    config_from,
    lm_batches,
    probe_forward,
    probe_windows,
    seeded_gpt,
    train_and_record,
    train_gpt,
)
from actlab.runner.experiment import STATUS_DIVERGED, UnitContext, UnitResult
from actlab.train.loop import TrainConfig

TINY = GPTConfig(block_size=16, n_layer=1, n_head=2, n_embd=16)


@pytest.fixture(scope="module")
def corpus() -> TextCorpus:
    words = [b"alpha", b"beta", b"gamma", b"delta", b"import", b"return", b"self", b"(x)"]
    g = torch.Generator().manual_seed(0)
    text = b" ".join(words[i] for i in torch.randint(0, len(words), (3000,), generator=g).tolist())
    data = np.frombuffer(text, dtype=np.uint8)
    return TextCorpus(train=data[:15000], val=data[15000:], name="words", n_files=1)


def _windows(data: np.ndarray, batch: int, block: int, generator: torch.Generator):
    """Reference batch: windows of the raw bytes at starts drawn uniformly by ``generator``."""
    starts = torch.randint(0, len(data) - block, (batch,), generator=generator).tolist()
    x = torch.tensor(np.stack([data[s:s + block] for s in starts]), dtype=torch.int64)
    y = torch.tensor(np.stack([data[s + 1:s + block + 1] for s in starts]), dtype=torch.int64)
    return x, y


def test_lm_batches_are_windows_of_the_corpus_fixed_by_seed_and_step(corpus) -> None:
    train_batch, validation = lm_batches(corpus, 4, 16, seed=3, eval_batches=2)
    for step in (0, 1, 7):
        x, y = train_batch(step)
        ref_x, ref_y = _windows(corpus.train, 4, 16,
                                torch.Generator().manual_seed(3 * 1_000_003 + step))
        assert x.dtype == torch.int64 and torch.equal(x, ref_x) and torch.equal(y, ref_y)
        assert torch.equal(train_batch(step)[0], x)  # a pure function of (seed, step)
    assert not torch.equal(train_batch(0)[0], train_batch(1)[0])
    assert not torch.equal(train_batch(0)[0], lm_batches(corpus, 4, 16, seed=4)[0](0)[0])
    g = torch.Generator().manual_seed(EVAL_SEED)
    reference = [_windows(corpus.val, 4, 16, g) for _ in range(2)]
    batches = validation()
    assert len(batches) == 2 and validation() is batches  # drawn once, then cached
    for (x, y), (ref_x, ref_y) in zip(batches, reference):
        assert torch.equal(x, ref_x) and torch.equal(y, ref_y)
    other_seed = lm_batches(corpus, 4, 16, seed=9, eval_batches=2)[1]()
    assert all(torch.equal(a[0], b[0]) for a, b in zip(batches, other_seed))
    with pytest.raises(ValueError):
        lm_batches(corpus, 0, 16, seed=0)


def _lr(step: int, config: TrainConfig) -> float:
    """Linear warmup to ``lr``, then cosine down to ``min_lr_ratio * lr`` at ``steps``."""
    if step < config.warmup:
        return config.lr * (step + 1) / config.warmup
    progress = (step - config.warmup) / (config.steps - config.warmup)
    floor = config.min_lr_ratio * config.lr
    return floor + (config.lr - floor) * 0.5 * (1 + math.cos(math.pi * progress))


def _plain_loop(corpus: TextCorpus, config: TrainConfig, seed: int, batch: int):
    """The same training written out: AdamW with decay on matrices, clipping, float64."""
    model = GPT(TINY, seed=seed).double()
    matrices = [p for p in model.parameters() if p.dim() >= 2]
    vectors = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": matrices},
                                   {"params": vectors, "weight_decay": 0.0}],
                                  lr=config.lr, betas=(config.beta1, config.beta2),
                                  weight_decay=config.weight_decay)
    losses = []
    for step in range(config.steps):
        x, y = _windows(corpus.train, batch, TINY.block_size,
                        torch.Generator().manual_seed(seed * 1_000_003 + step))
        logits, _ = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        for group in optimizer.param_groups:
            group["lr"] = _lr(step, config)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        losses.append(float(loss.detach()))
    return model, losses


def test_train_gpt_equals_a_plain_loop(corpus) -> None:
    config = TrainConfig(steps=6, lr=1e-2, warmup=2, grad_clip=0.5, eval_every=3, log_every=1,
                         dtype="float64", device="cpu")
    model, result = train_gpt(TINY, config, corpus, seed=5, batch_size=4, eval_batches=2)
    reference, losses = _plain_loop(corpus, config, seed=5, batch=4)
    assert result.status == "ok" and result.step == 6
    np.testing.assert_allclose([v for _, v in result.series("train_loss")], losses,
                               rtol=1e-10, atol=0)
    for key, value in reference.state_dict().items():
        torch.testing.assert_close(model.state_dict()[key], value, rtol=1e-9, atol=1e-12)
    # the last validation loss is the plain model's mean loss on the fixed windows
    with torch.no_grad():
        val = [F.cross_entropy(reference(x)[0].reshape(-1, 256), y.reshape(-1))
               for x, y in lm_batches(corpus, 4, 16, seed=0, eval_batches=2)[1]()]
    assert result.series("val_loss")[-1] == (6, pytest.approx(float(sum(val) / 2), rel=1e-10))
    assert [s for s, _ in result.series("val_loss")] == [0, 3, 6]


def test_train_gpt_lowers_the_loss_and_takes_a_model(corpus) -> None:
    config = TrainConfig(steps=40, lr=1e-2, warmup=4, eval_every=40, log_every=10,
                         device="cpu")
    given = GPT(TINY, seed=1)
    seen = []
    model, result = train_gpt(TINY, config, corpus, seed=1, batch_size=8, eval_batches=2,
                              model=given, on_step=lambda step, loss: seen.append(step))
    assert model is given and seen == list(range(1, 41))  # after every update
    (_, start), (_, end) = result.series("val_loss")
    assert start == pytest.approx(math.log(256), abs=0.1)  # near-uniform at initialisation
    assert end < start - 1.5
    train = [v for _, v in result.series("train_loss")]
    assert train == sorted(train, reverse=True)


def test_probe_forward_matches_forward_hooks_and_restores_the_mode(corpus) -> None:
    model = GPT(GPTConfig(block_size=16, n_layer=2, n_head=2, n_embd=16, dropout=0.3), seed=2)
    inputs = [x for x, _ in lm_batches(corpus, 4, 16, seed=0, eval_batches=3)[1]()]
    captured: dict[str, list[torch.Tensor]] = {}
    modules = {f"blocks.{i}": b for i, b in enumerate(model.blocks)}
    modules.update({f"blocks.{i}.mlp.act": b.mlp.act for i, b in enumerate(model.blocks)})
    handles = [m.register_forward_hook(
        lambda mod, inp, out, name=name: captured.setdefault(name, []).append(out.detach()))
        for name, m in modules.items()]
    model.eval()
    with torch.no_grad():
        for x in inputs:
            model(x)
    for handle in handles:
        handle.remove()
    model.train()
    table = probe_forward(model, inputs, metrics=("hidden_mean", "act_mean", "act_range"),
                          blocks=model.blocks)
    got = {(r.layer, r.metric): r.value for r in table.itertuples()}
    assert model.training  # the mode is restored, dropout was off during the passes
    for i in range(2):
        hidden = torch.cat(captured[f"blocks.{i}"]).double()
        act = torch.cat(captured[f"blocks.{i}.mlp.act"]).double()
        assert got[(f"blocks.{i}", "hidden_mean")] == pytest.approx(float(hidden.mean()), rel=1e-5)
        assert got[(f"blocks.{i}.mlp.act", "act_mean")] == pytest.approx(float(act.mean()),
                                                                         rel=1e-5)
        assert got[(f"blocks.{i}.mlp.act", "act_range")] == pytest.approx(
            float(act.max() - act.min()), rel=1e-6)
    assert all(p.grad is None for p in model.parameters())


def test_lm_scale_checks_its_fields_and_builds_the_configs() -> None:
    scale = LMScale(n_layer=2, n_embd=32, block_size=32, steps=50, warmup=5, lr=3e-3,
                    compile_model="off")
    model_config = scale.model_config(activation="relu", ffn="swiglu")
    assert (model_config.n_layer, model_config.n_embd, model_config.block_size) == (2, 32, 32)
    assert model_config.activation == "relu" and model_config.ffn == "swiglu"
    train_config = scale.train_config()
    assert (train_config.steps, train_config.warmup, train_config.lr) == (50, 5, 3e-3)
    assert train_config.compile is False and scale.train_config(compile=True).compile is True
    assert config_from(GPTConfig, scale).n_head == scale.n_head
    for field, value, message in (("batch_size", 0, "must be >= 1, got 0"),
                                  ("eval_batches", 0, "must be >= 1, got 0"),
                                  ("threads", -1, "must be >= 0, got -1"),
                                  ("compile_model", "of", "must be one of auto, on, off")):
        with pytest.raises(ConfigError, match=message) as err:
            LMScale(**{field: value})
        assert err.value.field == field
    for field, value in (("n_head", 3), ("steps", 0), ("schedule", "cosin")):
        with pytest.raises(ConfigError) as err:  # from the configs the scale builds
            LMScale(**{field: value})
        assert err.value.field == field


def test_unit_steps_seed_the_model_record_losses_and_mark_divergence(corpus,
                                                                   tmp_path: Path) -> None:
    ctx = UnitContext(workdir=tmp_path)
    scale = LMScale(n_layer=1, n_head=2, n_embd=16, block_size=16, batch_size=4, steps=4,
                    warmup=1, eval_every=2, eval_batches=1, log_every=2)
    model = seeded_gpt(scale.model_config(), 7, ctx)
    same = GPT(scale.model_config(), seed=7)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(),
                                                 same.state_dict().values()))
    windows = probe_windows(scale, corpus, 7, 2, ctx)
    expected = lm_batches(corpus, 4, 16, seed=0, eval_batches=2)[1]()
    assert len(windows) == 2 and all(torch.equal(w, x) for w, (x, _) in zip(windows, expected))

    result = UnitResult()
    outcome = train_and_record(scale, model, corpus, 7, ctx, result, "run",
                               losses=("train_loss", "val_loss"))
    rows = [(r[2], r[4], r[5]) for r in result.rows if r[4] in ("train_loss", "val_loss")]
    assert rows == [(h["step"], k, h[k]) for h in outcome.history
                    for k in ("train_loss", "val_loss") if k in h]
    metrics = {r[4] for r in result.rows}
    assert {"compiled", "first_step_s"} <= metrics and result.status == "ok"
    assert all(r[0] == "run" and r[1] == 7 and r[3] == "" for r in result.rows)

    broken = seeded_gpt(scale.model_config(), 7, ctx)
    with torch.no_grad():
        broken.lm_head.weight.fill_(float("nan"))
    diverged = UnitResult()
    outcome = train_and_record(scale, broken, corpus, 7, ctx, diverged, "run")
    assert outcome.status != "ok" and diverged.status == STATUS_DIVERGED
