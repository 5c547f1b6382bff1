"""``actlab profile PATH``: activation profile of a local Hugging Face model folder."""

from __future__ import annotations

from pathlib import Path

import click

from actlab.cli import main
from actlab.errors import ConfigError


def read_texts(path: Path) -> list[str]:
    """One text per non-empty line of ``path``; ``ConfigError`` for ``--texts`` if none."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError("--texts", f"cannot read {path}: {exc}") from None
    texts = [line.strip() for line in lines if line.strip()]
    if not texts:
        raise ConfigError("--texts", f"{path} holds no text (one text per line)")
    return texts


@main.command("profile")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--texts", "texts_file", type=click.Path(path_type=Path), default=None,
              help="text file, one input per line (default: 32 standard-library docstrings)")
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="output folder (default: ./profile-<model folder name>)")
@click.option("--max-tokens", type=click.IntRange(min=2), default=128, show_default=True,
              help="tokens per text (longer texts are truncated)")
def profile(path: Path, texts_file: Path | None, out: Path | None, max_tokens: int) -> None:
    """Profile the MLPs of the Hugging Face model in the local folder PATH (offline).

    Writes OUT/report.html and OUT/summary.json: per MLP the activation bias, negative
    pre-activation share, sparsity, dead units, down-projection input range and, for bounded
    activations only (sigmoid, tanh, ...), saturation; per layer the massive-activation
    ratio. The report defines each column. One text per forward pass (no padding).
    """
    if not path.is_dir():
        raise ConfigError("PATH", f"no such model folder: {path}")
    if not (path / "config.json").is_file():
        raise ConfigError("PATH", f"{path} has no config.json: not a Hugging Face model folder "
                                  "(save_pretrained writes one)")
    texts = read_texts(texts_file) if texts_file is not None else None
    from actlab.data.text import docstrings
    from actlab.hf import encode_each, load_hf_model
    from actlab.profile import profile_model

    try:
        model, tokenizer = load_hf_model(str(path))
    except (OSError, ValueError, KeyError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError("PATH", f"cannot load a model and tokenizer from {path}: {first}") from None
    inputs = encode_each(tokenizer, texts or docstrings(32), max_tokens)
    result = profile_model(model, inputs)
    result.info["path"] = path.resolve().name
    folder = result.write(out or Path(f"profile-{path.resolve().name}"))
    head = result.summary()["headline"]
    click.echo(f"{result.model_name}: {len(result.layout)} MLPs, {result.n_inputs} texts; "
               + ", ".join(f"{k} {v:.3g}" for k, v in head.items() if v is not None))
    click.echo(f"wrote {folder / 'report.html'} and {folder / 'summary.json'}")
