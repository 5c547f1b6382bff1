"""Hidden-state mean trajectories over a language model's training checkpoints.

"Rethinking Activation Functions" (App. E.2, Fig. 20) evaluates the public training
checkpoints of Pythia-410M, OLMo-2-1B and Amber-7B "on a fixed set of inputs" and computes
hidden-state means "as in Section 2.2": the elements of the residual-stream hidden state
averaged for each input, then across inputs. :func:`checkpoint_trajectory` does that for the
local checkpoint folders of any Hugging Face causal LM::

    from actlab.trajectory import checkpoint_trajectory

    result = checkpoint_trajectory(["pythia-410m/step1000", "pythia-410m/step512"])
    result.hidden_mean        # checkpoints x blocks, in step order
    result.overshoot()        # per block: (overshoot, step of its peak)
    result.write("trajectory-pythia-410m")   # trajectory.json, trajectory.csv, trajectory.png

What is measured (our reading of §2.2 for a transformer): per block, its output hidden state
(the residual stream after the block, taken by a forward hook, so the last block's output is
taken before the final norm, which Hugging Face's ``output_hidden_states`` applies to its
last entry); per input sequence the mean over its tokens and features; then the mean over
the sequences. The overshoot is the project's one definition,
:func:`actlab.analysis.trajectory_overshoot`.

Checkpoints are ordered by step: the steps given, else the step in each folder's name
(:func:`checkpoint_step`), else the ``global_step`` of its ``trainer_state.json``.

Inputs (:func:`fixed_inputs`) are the same token ids for every checkpoint: a text (a file,
or by default the running Python's standard library sources, files in sorted order)
tokenised once by the first tokenizer found (the ``tokenizer`` folder, else the first
checkpoint folder in step order that has one), without special tokens, cut into
``sequences`` rows of ``tokens`` consecutive ids. Without any tokenizer the ids are drawn
uniformly from ``[0, vocab_size)`` by ``torch.randint`` with a CPU generator seeded by
``seed`` (``vocab_size`` the smallest of the checkpoints' configs).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from actlab.analysis import trajectory_overshoot
from actlab.device import place, resolve_device
from actlab.errors import ConfigError, did_you_mean
from actlab.layout import transformer_blocks

__all__ = ["Trajectory", "block_means", "checkpoint_step", "checkpoint_trajectory",
           "draw_trajectory", "fixed_inputs", "has_tokenizer", "model_blocks", "order_checkpoints"]

# Step in a folder name, first match wins: the HF Trainer's ``checkpoint-1000``; Pythia's
# ``step1000`` and OLMo's ``stage1-step10000-tokens21B`` revisions; Megatron's ``iter_0001000``;
# LLM360's ``ckpt_358`` (Amber's revisions: a checkpoint index, not an optimizer step).
STEP_PATTERNS = (r"checkpoint[-_](\d+)", r"step[-_]?(\d+)", r"iter(?:ation)?[-_]?(\d+)",
                 r"ckpt[-_]?(\d+)")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
METRIC = "hidden_mean"


def checkpoint_step(path: str | os.PathLike) -> int | None:
    """The training step of a checkpoint folder: from its name (:data:`STEP_PATTERNS`), else
    the ``global_step`` of its ``trainer_state.json``; ``None`` when neither says."""
    name = Path(path).name
    for pattern in STEP_PATTERNS:
        match = re.search(pattern, name, re.IGNORECASE)
        if match:
            return int(match.group(1))
    state = Path(path) / "trainer_state.json"
    try:
        step = json.loads(state.read_text())["global_step"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return int(step) if isinstance(step, int) else None


def order_checkpoints(paths: Sequence[str | os.PathLike],
                      steps: Sequence[int] | None = None) -> list[tuple[int, Path]]:
    """``(step, folder)`` pairs sorted by step.

    ``steps`` (one per folder, in the order given) overrides what :func:`checkpoint_step`
    reads. Raises :class:`~actlab.errors.ConfigError` for a missing folder, a folder whose
    step is unknown, a step count that does not match, or two folders at one step.
    """
    folders = [Path(p) for p in paths]
    if not folders:
        raise ConfigError("CHECKPOINT_DIR", "give at least one checkpoint folder")
    for folder in folders:
        if not folder.is_dir():
            raise ConfigError("CHECKPOINT_DIR", f"no such checkpoint folder: {folder}")
    if steps is not None:
        if len(steps) != len(folders):
            raise ConfigError("--steps", f"{len(steps)} steps for {len(folders)} checkpoint "
                                         "folders (give one step per folder, in their order)")
        pairs = [(int(s), f) for s, f in zip(steps, folders)]
    else:
        pairs = []
        for folder in folders:
            step = checkpoint_step(folder)
            if step is None:
                raise ConfigError("CHECKPOINT_DIR", f"no step in the folder name {folder.name!r} "
                                  "(like step1000 or checkpoint-1000) nor in a trainer_state.json; "
                                  "give the steps with --steps")
            pairs.append((step, folder))
    pairs.sort(key=lambda pair: pair[0])
    for (a, fa), (b, fb) in zip(pairs, pairs[1:]):
        if a == b:
            raise ConfigError("CHECKPOINT_DIR", f"{fa} and {fb} are both at step {a}")
    return pairs


def _config(folder: Path) -> Any:
    """The folder's config, refused unless it is a causal LM that transformers knows."""
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    if not (folder / "config.json").is_file():
        raise ConfigError("CHECKPOINT_DIR", f"{folder} has no config.json: not a Hugging Face "
                                            "model folder (save_pretrained writes one)")
    try:
        config = transformers.AutoConfig.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ConfigError("CHECKPOINT_DIR", f"cannot read the config of {folder}: {first}") from None
    if config.model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        hint = did_you_mean(config.model_type, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, prefix="; ")
        raise ConfigError("CHECKPOINT_DIR", f"{folder} is not a causal LM: transformers has no "
                                            f"causal-LM class for model_type "
                                            f"{config.model_type!r}{hint}")
    return config


def has_tokenizer(folder: str | os.PathLike) -> bool:
    """Whether a folder holds a Hugging Face tokenizer (one of its usual files)."""
    return any((Path(folder) / name).is_file() for name in _TOKENIZER_FILES)


def _stdlib_text(enough: int) -> str:
    """The standard library's sources, files in sorted order, at least ``enough`` characters
    (all of them if there are fewer)."""
    from actlab.data.text import stdlib_files

    parts, size = [], 0
    for path in stdlib_files():
        parts.append(path.read_text(encoding="utf-8", errors="replace"))
        size += len(parts[-1])
        if size >= enough:
            break
    return "\n\n".join(parts)


def fixed_inputs(*, sequences: int, tokens: int, vocab_size: int, tokenizer: Any = None,
                 text: str | None = None, seed: int = 0) -> Tensor:
    """The ``(sequences, tokens)`` int64 ids every checkpoint sees (see the module's doc).

    With a ``tokenizer``: ``text`` (default: the standard library's sources) tokenised without
    special tokens, the first ``sequences * tokens`` ids in rows; a text too short for them
    gives as many full rows as it holds (at least one, else ``ConfigError``). Without one:
    ``torch.randint(0, vocab_size, (sequences, tokens))`` from a generator seeded by ``seed``.
    """
    if tokenizer is None:
        if text is not None:
            raise ConfigError("--text", "a text needs a tokenizer: none of the checkpoint "
                                        "folders has one; give one with --tokenizer FOLDER")
        generator = torch.Generator().manual_seed(seed)
        return torch.randint(0, vocab_size, (sequences, tokens), generator=generator)
    need = sequences * tokens
    budget = 8 * need  # characters: a few per token for any subword tokenizer
    while True:
        source = text if text is not None else _stdlib_text(budget)
        ids = tokenizer(source, add_special_tokens=False)["input_ids"]
        if len(ids) >= need or text is not None or len(source) < budget:
            break
        budget *= 2  # the stdlib has more: read further
    rows = min(sequences, len(ids) // tokens)
    if rows < 1:
        raise ConfigError("--text", f"the text gives {len(ids)} tokens, fewer than one "
                                    f"sequence of --tokens {tokens}")
    out = torch.tensor(ids[:rows * tokens], dtype=torch.long).view(rows, tokens)
    if int(out.max()) >= vocab_size:
        raise ConfigError("--tokenizer", f"the tokenizer gives id {int(out.max())}, outside the "
                                         f"model's vocabulary of {vocab_size}")
    return out


def model_blocks(model: nn.Module, n_layers: int | None) -> list[str]:
    """Names of the model's transformer blocks: :func:`actlab.layout.transformer_blocks`,
    else the first ``nn.ModuleList`` with ``n_layers`` entries (the config's layer count)."""
    try:
        return transformer_blocks(model)
    except ValueError:
        pass
    for name, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and n_layers and len(module) == n_layers:
            return [f"{name}.{i}" for i in range(n_layers)]
    raise ConfigError("CHECKPOINT_DIR", f"found no list of {n_layers} transformer blocks in "
                                        f"{type(model).__name__}")


def block_means(model: nn.Module, blocks: Sequence[str], input_ids: Tensor,
                batch_size: int = 8) -> np.ndarray:
    """Per block, the hidden-state mean of its output: per sequence the mean over tokens and
    features, then the mean over sequences (float64 accumulation, eval passes, no grads)."""
    named = dict(model.named_modules())
    sums = torch.zeros(len(blocks), dtype=torch.float64)

    def recorder(i: int):
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            hidden = output[0] if isinstance(output, (tuple, list)) else output
            sums[i] += hidden.detach().double().flatten(1).mean(1).sum().cpu()
        return hook

    handles = [named[name].register_forward_hook(recorder(i)) for i, name in enumerate(blocks)]
    device = next(model.parameters()).device
    base = getattr(model, "base_model", model)  # the blocks without the LM head's logits
    try:
        with torch.no_grad():
            for chunk in input_ids.split(batch_size):
                chunk = chunk.to(device)
                base(input_ids=chunk, attention_mask=torch.ones_like(chunk), use_cache=False)
    finally:
        for handle in handles:
            handle.remove()
    return (sums / len(input_ids)).numpy()


@dataclass
class Trajectory:
    """Hidden-state means of each block (columns) at each checkpoint (rows, in step order)."""

    steps: list[int]
    paths: list[str]
    modules: list[str]
    hidden_mean: np.ndarray
    input_ids: Tensor
    model_type: str = ""
    inputs: dict[str, Any] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def blocks(self) -> list[str]:
        """Block labels ``block0 .. block{L-1}`` (the ``layer`` column of :meth:`table`)."""
        return [f"block{i}" for i in range(len(self.modules))]

    def overshoot(self) -> dict[str, tuple[float, float]]:
        """Per block ``(overshoot, step of its peak)`` by
        :func:`actlab.analysis.trajectory_overshoot` (``nan`` where undefined)."""
        return {b: trajectory_overshoot(self.hidden_mean[:, i], self.steps)
                for i, b in enumerate(self.blocks)}

    def table(self, run: str = "") -> Any:
        """The tidy frame ``run, seed, step, layer, metric, value`` (seed 0, metric
        ``hidden_mean``), readable by :mod:`actlab.analysis`."""
        import pandas as pd

        rows = [(run or self.model_type, 0, step, block, METRIC, float(self.hidden_mean[t, i]))
                for t, step in enumerate(self.steps) for i, block in enumerate(self.blocks)]
        return pd.DataFrame(rows, columns=["run", "seed", "step", "layer", "metric", "value"])

    def summary(self) -> dict[str, Any]:
        """Everything JSON-ready (non-finite values become ``None``)."""
        over = self.overshoot()
        return {
            "model_type": self.model_type,
            "statistic": "hidden-state mean: per sequence the mean over tokens and features of "
                         "the block's output (residual stream, before the final norm), then "
                         "the mean over sequences",
            "overshoot_definition": "max(0, max_t s*(h_t - h_T)), s = sign(h_T - h_0) "
                                    "(actlab.analysis.trajectory_overshoot)",
            "checkpoints": [{"step": s, "path": p} for s, p in zip(self.steps, self.paths)],
            "steps": list(self.steps),
            "blocks": self.blocks,
            "modules": list(self.modules),
            "inputs": dict(self.inputs),
            METRIC: {b: [_finite(v) for v in self.hidden_mean[:, i]]
                     for i, b in enumerate(self.blocks)},
            "overshoot": {b: _finite(o) for b, (o, _) in over.items()},
            "overshoot_step": {b: _finite(s) for b, (_, s) in over.items()},
            **self.info,
        }

    def write(self, out: str | os.PathLike, run: str = "") -> Path:
        """Write ``trajectory.json``, ``trajectory.csv`` (the tidy table) and
        ``trajectory.png`` (:func:`draw_trajectory`) into the folder ``out``."""
        folder = Path(out)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "trajectory.json").write_text(json.dumps(self.summary(), indent=2) + "\n")
        self.table(run).to_csv(folder / "trajectory.csv", index=False)
        draw_trajectory(self, folder / "trajectory.png", title=run or self.model_type)
        return folder


def draw_trajectory(result: Trajectory, path: str | os.PathLike, title: str = "",
                    representative: int = 4) -> Path:
    """App. E.2's figure (Fig. 20) for one model: hidden-state mean against step.

    Left, every block (colour by depth); right, the ``representative`` blocks with the largest
    overshoot (first, middle and last block when none overshoots), each with its final value
    dashed and its peak starred. The step axis is symmetric-log when the steps span two
    decades or more (step 0 stays on it), linear otherwise.
    """
    from matplotlib import cm, colors, ticker

    from actlab.plotting import pyplot

    plt = pyplot()
    steps = np.asarray(result.steps, dtype=float)
    over = result.overshoot()
    fig, (every, chosen) = plt.subplots(1, 2, figsize=(11, 4), constrained_layout=True)
    n = len(result.blocks)
    norm = colors.Normalize(vmin=0, vmax=max(n - 1, 1))
    for i in range(n):
        every.plot(steps, result.hidden_mean[:, i], color=cm.viridis(norm(i)), lw=1.2)
    fig.colorbar(cm.ScalarMappable(norm=norm, cmap="viridis"), ax=every, label="block",
                 ticks=ticker.MaxNLocator(integer=True))
    every.set_title("every block")
    ranked = sorted((o, i) for i, (o, _) in enumerate(over.values()) if o > 0)[::-1]
    picks = [i for _, i in ranked[:representative]] or sorted({0, n // 2, n - 1})
    for i in sorted(picks):
        block = result.blocks[i]
        line, = chosen.plot(steps, result.hidden_mean[:, i], marker="o", ms=3, label=block)
        chosen.axhline(result.hidden_mean[-1, i], color=line.get_color(), ls="--", lw=0.7)
        value, peak = over[block]
        if value > 0:
            at = int(np.flatnonzero(steps == peak)[0])
            chosen.plot(peak, result.hidden_mean[at, i], marker="*", ms=12,
                        color=line.get_color())
    chosen.set_title("largest overshoot (star: peak; dashed: final value)")
    chosen.legend(fontsize=8)
    positive = steps[steps > 0]
    for ax in (every, chosen):
        if positive.size and steps.max() >= 100 * positive.min():
            ax.set_xscale("symlog", linthresh=float(positive.min()))
        ax.set_xlabel("step")
        ax.set_ylabel("hidden-state mean")
    if title:
        fig.suptitle(title)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)


def _finite(value: float) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


def _progress(total: int, show: bool | None) -> tuple[Any, bool]:
    """A tqdm bar over checkpoints (``True`` always, ``False`` never, ``None`` on a terminal),
    and whether to print a plain line per checkpoint instead (``None`` off a terminal: a log)."""
    from tqdm.auto import tqdm

    tty = sys.stderr.isatty()
    bar = tqdm(total=total, desc="checkpoints", unit="ckpt", file=sys.stderr,
               disable=not (show if show is not None else tty))
    return bar, show is None and not tty


def checkpoint_trajectory(checkpoints: Sequence[str | os.PathLike], *,
                          steps: Sequence[int] | None = None,
                          text: str | os.PathLike | None = None,
                          tokenizer: str | os.PathLike | None = None,
                          sequences: int = 8, tokens: int = 128, seed: int = 0,
                          batch_size: int = 8, device: str | torch.device | None = None,
                          dtype: str | torch.dtype = torch.float32,
                          progress: bool | None = False) -> Trajectory:
    """Hidden-state means per block of every checkpoint folder, in step order, on fixed inputs.

    ``checkpoints``: local folders of one Hugging Face causal LM (``save_pretrained``
    output), ordered by :func:`order_checkpoints` (``steps``, one per folder, overrides the
    folder names). ``text``: a text file for the inputs (needs a tokenizer); ``tokenizer``: a
    folder to load it from; ``sequences`` x ``tokens``: the input ids (:func:`fixed_inputs`);
    ``device`` (default the unit's), ``dtype`` of the weights; ``progress``: a bar over
    checkpoints (``None``: on a terminal only). All folders are checked before any is loaded:
    :class:`~actlab.errors.ConfigError` for a missing one, one that is not a causal LM, or
    checkpoints of different architectures.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    for name, value in (("--sequences", sequences), ("--tokens", tokens),
                        ("--batch-size", batch_size)):
        if int(value) < 1:
            raise ConfigError(name, f"must be at least 1, got {value}")
    if isinstance(dtype, str):
        if dtype not in DTYPES:
            raise ConfigError("--dtype", f"unknown dtype {dtype!r}" + did_you_mean(
                dtype, DTYPES, prefix="; ", fallback=True))
        dtype = DTYPES[dtype]
    ordered = order_checkpoints(checkpoints, steps)
    configs = [_config(folder) for _, folder in ordered]
    shapes = {(c.model_type, getattr(c, "num_hidden_layers", None)) for c in configs}
    if len(shapes) > 1:
        raise ConfigError("CHECKPOINT_DIR", "the checkpoints are not of one model: "
                          + ", ".join(f"{t} with {n} layers" for t, n in sorted(shapes, key=str)))
    vocab = min(int(c.vocab_size) for c in configs)
    limit = getattr(configs[0], "max_position_embeddings", None)
    if isinstance(limit, int) and tokens > limit:
        raise ConfigError("--tokens", f"{tokens} tokens per sequence, more than the model's "
                                      f"{limit} positions")
    if text is not None and not Path(text).is_file():
        raise ConfigError("--text", f"no such file: {text}")
    if tokenizer is not None and not has_tokenizer(tokenizer):
        raise ConfigError("--tokenizer", f"{tokenizer} holds no tokenizer files "
                                         f"({', '.join(_TOKENIZER_FILES)})")
    source = Path(tokenizer) if tokenizer is not None else next(
        (folder for _, folder in ordered if has_tokenizer(folder)), None)
    words = Path(text).read_text(encoding="utf-8", errors="replace") if text is not None else None
    tok = _load_tokenizer(source) if source is not None else None
    ids = fixed_inputs(sequences=sequences, tokens=tokens, vocab_size=vocab, tokenizer=tok,
                       text=words, seed=seed)
    inputs = {"source": "random" if tok is None else ("text" if text is not None else "stdlib"),
              "sequences": int(ids.shape[0]), "tokens": int(ids.shape[1]),
              "sha256": hashlib.sha256(ids.numpy().tobytes()).hexdigest()[:16]}
    if tok is None:
        inputs.update(seed=seed, vocab_size=vocab)
    else:
        inputs.update(tokenizer=str(source), text=str(text) if text is not None else
                      f"Python {sys.version_info.major}.{sys.version_info.minor} standard library")
    means, modules = _measure(ordered, configs, ids, batch_size, device, dtype, progress)
    return Trajectory(steps=[s for s, _ in ordered], paths=[str(f) for _, f in ordered],
                      modules=modules, hidden_mean=np.stack(means), input_ids=ids,
                      model_type=configs[0].model_type, inputs=inputs,
                      info={"dtype": str(dtype).removeprefix("torch."),
                            "device": str(resolve_device(device))})


def _measure(ordered: list[tuple[int, Path]], configs: list[Any], ids: Tensor, batch_size: int,
             device: str | torch.device | None, dtype: torch.dtype,
             progress: bool | None) -> tuple[list[np.ndarray], list[str]]:
    """Load each checkpoint in turn (one in memory at a time) and measure its block means."""
    from transformers.utils import logging as hf_logging

    means: list[np.ndarray] = []
    modules: list[str] = []
    bar, log_lines = _progress(len(ordered), progress)
    muted = hf_logging.is_progress_bar_enabled()
    if muted:  # transformers' per-load bar would break ours
        hf_logging.disable_progress_bar()
    try:
        for i, (step, folder) in enumerate(ordered):
            model = _load_model(folder, dtype, device)
            modules = model_blocks(model, getattr(configs[i], "num_hidden_layers", None))
            means.append(block_means(model, modules, ids, batch_size))
            del model
            bar.update(1)
            if log_lines:
                print(f"checkpoints: {i + 1}/{len(ordered)} (step {step})", file=sys.stderr,
                      flush=True)
    finally:
        bar.close()
        if muted:
            hf_logging.enable_progress_bar()
    return means, modules


def _load_tokenizer(folder: Path) -> Any:
    import transformers

    transformers.logging.set_verbosity_error()
    try:
        return transformers.AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ConfigError("--tokenizer", f"cannot load a tokenizer from {folder}: {first}") from None


def _load_model(folder: Path, dtype: torch.dtype, device: str | torch.device | None) -> nn.Module:
    import transformers

    from actlab.hf import from_pretrained_options

    transformers.logging.set_verbosity_error()
    # transformers 5 names the weights' dtype ``dtype``; 4.x ``torch_dtype``
    key = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(
            str(folder), **{key: dtype}, **from_pretrained_options())
    except (OSError, ValueError, KeyError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ConfigError("CHECKPOINT_DIR", f"cannot load a causal LM from {folder}: {first}") from None
    return place(model, device).eval()
