"""``actlab trajectory CHECKPOINT_DIR...``: hidden-state means per block over training
checkpoints ("Rethinking Activation Functions", App. E.2), a thin wrapper of
:func:`actlab.trajectory.checkpoint_trajectory`."""

from __future__ import annotations

import math
from pathlib import Path

import click

from actlab.cli import main
from actlab.errors import ConfigError


class _OneLineErrors(click.Command):
    """A command whose usage errors (unknown option, bad value) are one line and exit 2,
    like the errors the command raises itself."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:  # noqa: D102
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            click.echo(f"error: {exc.format_message()}", err=True)
            ctx.exit(2)


def _steps(value: str | None) -> list[int] | None:
    """``"0,1000,2000"`` -> ``[0, 1000, 2000]``."""
    if value is None:
        return None
    try:
        return [int(part) for part in value.split(",") if part.strip()]
    except ValueError:
        raise ConfigError("--steps", f"want whole numbers separated by commas, got {value!r}") from None


@main.command("trajectory", cls=_OneLineErrors)
@click.argument("checkpoints", metavar="CHECKPOINT_DIR...", nargs=-1, required=True,
                type=click.Path(path_type=Path))
@click.option("--steps", default=None, metavar="S1,S2,...",
              help="the step of each CHECKPOINT_DIR, in the order given (default: read from "
                   "each folder's name, else its trainer_state.json)")
@click.option("--text", "text", type=click.Path(path_type=Path), default=None,
              help="text file for the inputs (default: the standard library's sources)")
@click.option("--tokenizer", type=click.Path(path_type=Path), default=None,
              help="folder to load the tokenizer from (default: the first checkpoint folder, "
                   "in step order, that has one)")
@click.option("--sequences", type=int, default=8, show_default=True,
              help="input sequences")
@click.option("--tokens", type=int, default=128, show_default=True,
              help="tokens per sequence")
@click.option("--seed", type=int, default=0, show_default=True,
              help="seed of the random token ids used when no tokenizer is found")
@click.option("--batch-size", type=int, default=8, show_default=True,
              help="sequences per forward pass")
@click.option("--device", default="cpu", show_default=True, help="cpu, cuda or cuda:N")
@click.option("--dtype", type=click.Choice(["float32", "bfloat16", "float16"]),
              default="float32", show_default=True, help="dtype the weights are loaded in")
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="output folder (default: ./trajectory-<folder holding the checkpoints>)")
def trajectory(checkpoints: tuple[Path, ...], steps: str | None, text: Path | None,
               tokenizer: Path | None, sequences: int, tokens: int, seed: int,
               batch_size: int, device: str, dtype: str, out: Path | None) -> None:
    """Hidden-state mean of every block over the training checkpoints of one causal LM.

    CHECKPOINT_DIR...: local Hugging Face folders (save_pretrained output; no download) of
    one model at several training steps, as "Rethinking Activation Functions" App. E.2 reads
    the public checkpoints of Pythia-410M, OLMo-2-1B and Amber-7B.

    Order: checkpoints are sorted by step, whatever order they are given in. The step is
    --steps (one per folder, in the order given), else the number in the folder's name
    (checkpoint-1000, step1000, stage1-step10000-tokens21B, iter_0001000, ckpt_358; first
    pattern that matches), else global_step in its trainer_state.json. Two folders at one
    step, or a folder without a step, are refused.

    Inputs, the same token ids for every checkpoint: --text (default: the Python standard
    library's sources, files in sorted order) tokenised without special tokens by the
    tokenizer of --tokenizer, else of the first checkpoint folder (step order) that has
    one, cut into --sequences rows of --tokens ids. Without any tokenizer: ids drawn
    uniformly from the vocabulary by torch.randint seeded with --seed.

    Measured per block: its output hidden state (the residual stream after the block,
    before the model's final norm), averaged over tokens and features for each sequence,
    then over sequences (App. E.2 computes them "as in Section 2.2"). Overshoot per block:
    max(0, max_t s*(h_t - h_T)) with s = sign(h_T - h_0), how far the trajectory goes past
    its final value (actlab.analysis.trajectory_overshoot).

    Writes OUT/trajectory.json (steps, per-block means, overshoot and its step, inputs),
    OUT/trajectory.csv (tidy rows run, seed, step, layer, metric, value) and
    OUT/trajectory.png (every block; the blocks with the largest overshoot).
    """
    from actlab.trajectory import checkpoint_trajectory

    result = checkpoint_trajectory(checkpoints, steps=_steps(steps), text=text,
                                   tokenizer=tokenizer, sequences=sequences, tokens=tokens,
                                   seed=seed, batch_size=batch_size, device=device,
                                   dtype=dtype, progress=None)
    first = Path(result.paths[0]).resolve()
    run = first.parent.name or result.model_type
    folder = result.write(out or Path(f"trajectory-{run}"), run=run)
    over = {b: o for b, (o, _) in result.overshoot().items() if math.isfinite(o)}
    inputs = result.inputs
    line = (f"{result.model_type}: {len(result.steps)} checkpoints (steps {result.steps[0]}.."
            f"{result.steps[-1]}), {len(result.blocks)} blocks, inputs {inputs['sequences']} x "
            f"{inputs['tokens']} tokens ({inputs['source']})")
    if over:
        top = max(over, key=over.get)
        line += f"; largest overshoot {over[top]:.3g} ({top})"
    click.echo(line)
    click.echo(f"wrote {folder / 'trajectory.json'}, trajectory.csv and trajectory.png")
