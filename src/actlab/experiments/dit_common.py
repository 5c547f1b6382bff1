"""What ``dit-shift`` and ``dit-percentile`` share on the experiment side: the summaries
and the figures of the DiT protocol (:mod:`actlab.recipes.dit_protocol`, which trains and
measures each condition).

Summaries: paired differences over seeds (:func:`paired`), a difference's worst checkpoint
against a margin within the seed spread (:func:`spread_numbers`, :func:`within_spread`),
the per-condition numbers (:func:`condition_summary`) and the settings as run
(:func:`scale_summary`). Figures: sample grids, FID / IS curves, paired residuals and the
hidden-state means per block.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from actlab import analysis
from actlab.recipes.dit_setup import CUSTOM, DiTProtocolConfig

DIGITS_NETWORK = "digits-classifier"
INCEPTION_NETWORK = "inception-v3-fid"  # actlab.measure.inception.NAME
FID = f"fid_{DIGITS_NETWORK}"  # the digits' metric names (the default scale's)
IS = f"is_{DIGITS_NETWORK}"


def feature_network(config: DiTProtocolConfig) -> str | None:
    """The name of the network a config's samples are scored on: the digits classifier on
    the digits, the FID Inception-v3 on decoded latents, None for latents not scored."""
    if config.data == "digits":
        return DIGITS_NETWORK
    return INCEPTION_NETWORK if config.scores_latents else None


def quality_metrics(config: DiTProtocolConfig) -> tuple[str, str]:
    """The config's FID and IS metric names (``fid_<network>``, ``is_<network>``)."""
    name = feature_network(config) or DIGITS_NETWORK
    return f"fid_{name}", f"is_{name}"


def paired(table: pd.DataFrame, run: str, base: str, metric: str, layer: str = "") -> pd.DataFrame:
    """Per checkpoint: mean and sample sd over seeds of ``run − base`` (paired by seed), and
    the number of seeds."""
    a = analysis.curves(table, run, metric, layer)
    b = analysis.curves(table, base, metric, layer)
    diff = (a - b).dropna(how="all")
    return pd.DataFrame(
        {"mean": diff.mean(axis=1), "sd": diff.std(axis=1, ddof=1), "n": diff.count(axis=1)}
    )


# What :func:`spread_numbers` returns when nothing can be judged (claims start from it).
EMPTY_SPREAD: dict[str, Any] = {
    "high": None,
    "low": None,
    "seeds": 0,
    "checkpoints": 0,
    "worst_step": None,
    "worst_mean": None,
}


def spread_numbers(
    diff: pd.DataFrame, steps: Sequence[int] | None = None, margin: float | pd.Series = 0.0
) -> dict[str, Any]:
    """The worst checkpoint of a paired difference against ``margin`` within the seed spread.

    ``high`` = max over checkpoints of (mean − margin + sd): at most 0 means the difference
    stays at or below the margin everywhere even at the top of its spread; ``low`` = max of
    (mean − margin − sd): above 0 means some checkpoint is above the margin beyond its spread;
    ``seeds`` the fewest seeds at a checkpoint (under 2: no spread, the values are None).
    """
    if steps is not None:
        diff = diff.loc[[s for s in steps if s in diff.index]]
    if diff.empty:
        return dict(EMPTY_SPREAD)
    excess = diff["mean"] - margin
    seeds = int(diff["n"].min())
    if seeds < 2:
        return {**EMPTY_SPREAD, "seeds": seeds, "checkpoints": len(diff)}
    worst = excess.idxmax()
    return {
        "high": float((excess + diff["sd"]).max()),
        "low": float((excess - diff["sd"]).max()),
        "seeds": seeds,
        "checkpoints": len(diff),
        "worst_step": int(worst) if isinstance(worst, (int, np.integer)) else str(worst),
        "worst_mean": float(diff["mean"][worst]),
    }


def within_spread(numbers: dict[str, Any]) -> str:
    """The precondition text of a claim decided only beyond the seed spread ('' when decided)."""
    if numbers.get("seeds", 0) < 2:
        return "fewer than 2 seeds: no seed spread"
    if numbers["high"] > 0 >= numbers["low"]:
        return "within the seed spread"
    return ""


def condition_summary(table: pd.DataFrame, run: str, depth: int,
                      metrics: tuple[str, str] = (FID, IS)) -> dict[str, Any]:
    """Per condition: final FID / IS (``metrics``, named by their network) / detail (seed
    mean and sd), final train loss and the hidden-state overshoot of every block (seed means
    of :func:`actlab.analysis.overshoot`: how far the trajectory goes past its final value)
    and the mean step of its peak."""
    out: dict[str, Any] = {}
    for metric in (*metrics, "detail_ratio", "train_loss"):
        curve = analysis.curves(table, run, metric)
        if not curve.empty:
            mean, sd = analysis.mean_and_sd(curve.iloc[-1])
            out[f"final_{metric}"], out[f"final_{metric}_sd"] = mean, sd
    fid = analysis.curves(table, run, metrics[0])
    if not fid.empty:
        out["fid_curve"] = {int(s): analysis.finite_mean(v) for s, v in fid.iterrows()}
    overshoot, step = {}, {}
    for block in range(depth):
        hidden = analysis.curves(table, run, "hidden_mean", f"block{block}")
        if not hidden.empty:
            overshoot[f"block{block}"] = analysis.finite_mean(analysis.overshoot(hidden))
            step[f"block{block}"] = analysis.finite_mean(analysis.overshoot_peak_step(hidden))
    out["overshoot_per_block"] = overshoot
    out["overshoot_step_per_block"] = step
    return out


def model_depth(config: DiTProtocolConfig) -> int:
    """Blocks of the configured model."""
    if config.model == CUSTOM:
        return config.depth
    from actlab.nn.dit import dit_config

    return dit_config(config.model).depth


def scale_summary(config: DiTProtocolConfig, table: pd.DataFrame) -> dict[str, Any]:
    """The protocol's settings as run (ours: the scaled EMA decay and warm-up)."""
    return {
        "model": config.model
        if config.model != CUSTOM
        else f"custom: hidden {config.hidden_size}, depth {config.depth}, heads "
        f"{config.num_heads}, patch {config.patch_size}",
        "data": config.data,
        "steps": config.steps,
        "batch_size": config.batch_size,
        "optimizer": f"adamw lr={config.lr:g} wd={config.weight_decay:g}",
        "ema_decay": config.ema_decay,
        "warmup": config.warmup,
        "fid_samples": config.fid_samples,
        "sample_steps": config.sample_steps,
        "cfg_scale": config.cfg_scale,
        "eval_steps": config.eval_steps(),
        "feature_network": feature_network(config),
        "sampler": config.sampler,
        "seeds": analysis.seeds_in(table) if len(table) else [],
    }


# ------------------------------------------------------------------------------ figures
def draw_sample_grids(
    results: list[dict[str, Any]],
    runs: Sequence[str],
    ctx: Any,
    name: str = "samples",
    seed: int = 0,
) -> None:
    """One panel per condition (rows) and FID checkpoint (columns): the first samples of each
    class (columns of a panel) from the fixed noise, seed ``seed``."""
    grids = {}
    for record in results:
        for key, value in (record.get("data") or {}).items():
            if key.endswith(f"/seed{seed}") and "grids" in value:
                grids[key.rsplit("/seed", 1)[0]] = value["grids"]
    runs = [r for r in runs if r in grids]
    if not runs:
        return
    plt = analysis.pyplot()
    steps = sorted({int(s) for r in runs for s in grids[r]})
    fig, axes = plt.subplots(
        len(runs), len(steps), squeeze=False, figsize=(2.2 * len(steps), 1.1 * len(runs) + 0.6)
    )
    for i, run in enumerate(runs):
        for j, step in enumerate(steps):
            ax = axes[i, j]
            ax.set_xticks([]), ax.set_yticks([])
            cell = grids[run].get(str(step))
            if cell is None:
                continue
            arr = np.asarray(cell, dtype=float)  # classes x per x H x W
            classes, per, h, w = arr.shape
            mosaic = arr.transpose(1, 2, 0, 3).reshape(per * h, classes * w)
            ax.imshow(mosaic, cmap="gray_r", vmin=-1, vmax=1)
            if i == 0:
                ax.set_title(f"step {step}", fontsize=8)
            if j == 0:
                ax.set_ylabel(run.split("/", 1)[-1], fontsize=7)
    fig.suptitle(
        f"EMA samples (fixed noise and labels, seed {seed}): classes 0-9 across", fontsize=9
    )
    ctx.save_figure(fig, name)


def draw_fid_curves(table: pd.DataFrame, runs: Sequence[str], ctx: Any, name: str = "fid",
                    network: str = DIGITS_NETWORK) -> None:
    """FID (``network`` features) and IS over training per condition, mean ± sd."""
    plt = analysis.pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    drawn = False
    for run in runs:
        for ax, metric in zip(axes, (f"fid_{network}", f"is_{network}")):
            curve = analysis.curves(table, run, metric)
            if curve.empty:
                continue
            drawn = True
            mean, sd = curve.mean(axis=1), curve.std(axis=1, ddof=1).fillna(0.0)
            ax.errorbar(
                curve.index, mean, yerr=sd, capsize=3, marker="o", ms=3, label=run.split("/", 1)[-1]
            )
    if not drawn:
        plt.close(fig)
        return
    axes[0].set_title(f"FID ({network} features), mean ± sd over seeds", fontsize=9)
    axes[1].set_title(f"IS ({network} logits), mean ± sd over seeds", fontsize=9)
    for ax in axes:
        ax.set_xlabel("step")
    axes[0].legend(fontsize=7)
    ctx.save_figure(fig, name)


def draw_residuals(
    table: pd.DataFrame, runs: Sequence[str], base: str, ctx: Any, name: str = "loss_residuals",
    network: str = DIGITS_NETWORK,
) -> None:
    """Paired residuals against ``base`` (mean ± sd over seeds): training loss and FID (on
    ``network``'s features)."""
    plt = analysis.pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for run in runs:
        if run == base:
            continue
        for ax, metric in zip(axes, ("train_loss", f"fid_{network}")):
            diff = paired(table, run, base, metric)
            if diff.empty:
                continue
            ax.errorbar(
                diff.index,
                diff["mean"],
                yerr=diff["sd"].fillna(0.0),
                capsize=3,
                marker="o",
                ms=3,
                label=run.split("/", 1)[-1],
            )
    short = base.split("/", 1)[-1]
    axes[0].set_title(f"training-loss residual (condition − {short}), fixed draws", fontsize=9)
    axes[1].set_title(f"FID residual (condition − {short}), {network} features", fontsize=9)
    for ax in axes:
        ax.axhline(0.0, color="k", lw=0.8)
        ax.set_xlabel("step")
        ax.set_xscale("symlog", linthresh=10)
    axes[0].legend(fontsize=7)
    ctx.save_figure(fig, name)


def draw_hidden_means(
    table: pd.DataFrame, runs: Sequence[str], depth: int, ctx: Any, name: str = "hidden_means"
) -> None:
    """The residual-stream mean after every block over training, per condition (seed mean)."""
    plt = analysis.pyplot()
    cols = min(depth, 6)
    rows = math.ceil(depth / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.8 * rows), squeeze=False)
    for block in range(depth):
        ax = axes[block // cols, block % cols]
        for run in runs:
            curve = analysis.curves(table, run, "hidden_mean", f"block{block}")
            if not curve.empty:
                ax.plot(curve.index, curve.mean(axis=1), marker=".", label=run.split("/", 1)[-1])
        ax.set_title(f"hidden-state mean after block {block}", fontsize=8)
        ax.set_xscale("symlog", linthresh=10)
    axes[0, 0].legend(fontsize=6)
    ctx.save_figure(fig, name)


__all__ = ["DIGITS_NETWORK", "EMPTY_SPREAD", "FID", "INCEPTION_NETWORK", "IS",
           "condition_summary", "draw_fid_curves", "draw_hidden_means", "draw_residuals",
           "draw_sample_grids", "feature_network", "model_depth", "paired", "quality_metrics",
           "scale_summary", "spread_numbers", "within_spread"]
