"""``bias-component``: what a conv autoencoder decodes from the activation-bias component.

Seed 000 §3, eq. 8, Figs. 5, 17, 18 and App. D. A small VGG-style autoencoder
(:class:`~actlab.nn.autoencoder.ConvAutoencoder`) learns to reconstruct images with plain
``relu`` (unshifted) or ``relu:shift=theory`` (every ReLU becomes ``ReLU(z) - 0.23``). Both
models of a seed start from the same weights and see the same batches. At log- and
linearly-spaced checkpoints, on a fixed set of held-out images, we measure

* the reconstruction loss (per-pixel mean squared error; Fig. 17's residual is shifted minus
  unshifted);
* the similarity between the image decoded from the bias component ``h_bias`` alone (the
  channel mean at every location, eq. 8) and the full reconstruction: Pearson correlation
  (``similarity``, the headline), cosine and PSNR; the same for the deviation ``h_dev``;
* the share of the latent's energy in the bias component ``|h_bias|^2 / |h|^2``.

Data: scikit-learn's digits upsampled to ``image_size`` (default 16, standardized), or
CIFAR-10 from its python pickle files when ``data_dir`` is set (``--set data_dir=PATH``;
nothing is downloaded). The step-0 checkpoint is the untrained model; the peak of the
similarity curve is searched over the trained checkpoints (step >= 1).

``summary.json``::

    {"data": ..., "similarity": "correlation", "scale": {...},
     "unshifted": {"similarity_peak_step", "similarity_peak", "similarity_final",
                   "similarity_initial", "similarity_first_trained", "final_loss", ...},
     "shifted": {... the same ...},
     "final_loss_unshifted", "final_loss_shifted", "loss_residual_final",
     "loss_residual_early", "early_step", "failed_units"}
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from actlab import analysis
from actlab.experiments._bias_config import BiasComponentConfig
from actlab.experiments._bias_summary import (  # noqa: F401 (re-exported)
    CONDITIONS,
    LANDMARKS,
    PREFIX,
    describe_condition,
)
from actlab.experiments._bias_summary import (
    bias_figures as _figures,
)
from actlab.experiments._bias_train import (  # noqa: F401 (re-exported)
    PARTS,
    checkpoint_steps,
    grid_steps,
    load_images,
    measure_checkpoint,
    train_autoencoder,
)
from actlab.experiments._common import fmt_or_na
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
from actlab.train.supervised import torch_threads

# A rise or fall of the bias-only similarity counts when it exceeds this (correlation units);
# fixed before any run, as a plain "clearly more than noise between checkpoints" margin.
RISE_FALL_MARGIN = 0.05


@register
class BiasComponent(Experiment):
    """Unshifted vs shifted ReLU autoencoders: decode the bias component and the deviation."""

    name = "bias-component"
    headline_figure = "fig17_loss_residual"
    description = ("Conv autoencoder: reconstructions from the activation-bias component (eq. 8), "
                   "unshifted vs shifted ReLU (seed 000 §3, App. D)")
    Config = BiasComponentConfig
    quick = {"steps": 700, "log_points": 24, "n_eval": 128}
    full = {"steps": 6000, "log_points": 50}
    default_seeds = 2
    seeds_per_unit = 1

    def units(self, config: BiasComponentConfig) -> list[dict[str, Any]]:
        """One unit per condition (each trains every seed of its group)."""
        return [{"condition": c, "activation": getattr(config, c)} for c in CONDITIONS]

    def run_unit(self, config: BiasComponentConfig, unit: dict[str, Any], seeds: list[int],
                 ctx: UnitContext) -> UnitResult:
        """Train the condition's autoencoder for each seed; keep grid images per seed."""
        result = UnitResult()
        x_train, x_eval, name = load_images(config)
        run = f"{PREFIX}/{unit['condition']}"
        with torch_threads(config.threads):
            for seed in seeds:
                status, images = train_autoencoder(config, unit["activation"], seed, x_train,
                                                   x_eval, result, run, ctx.progress)
                result.data[str(seed)] = images
                result.data["dataset"] = name
                if status == STATUS_DIVERGED:
                    result.status = STATUS_DIVERGED
        return result

    def summarize(self, config: BiasComponentConfig, table: pd.DataFrame,
                  results: list[dict[str, Any]], ctx: RunContext) -> dict:
        """Similarity peaks and final values per model, loss residuals; the figures."""
        dataset = next((r["data"].get("dataset") for r in results if r["data"]), None)
        summary: dict[str, Any] = {
            "data": dataset or ("cifar10" if config.data_dir else "digits"),
            "similarity": "correlation",
            "scale": {"steps": config.steps, "batch_size": config.batch_size,
                      "widths": list(config.widths), "convs_per_stage": config.convs_per_stage,
                      "init": config.init,
                      "image_size": 32 if config.data_dir else config.image_size,
                      "optimizer": f"{config.optimizer} lr={config.lr:g}",
                      "seeds": sorted({int(s) for s in table["seed"]}) if len(table) else []},
            "failed_units": [r["unit"] for r in results if r["status"] != "ok"],
        }
        for cond in CONDITIONS:
            summary[cond] = describe_condition(table, f"{PREFIX}/{cond}", config.min_fit)
            summary[f"final_loss_{cond}"] = summary[cond].get("final_loss")
        summary.update(early_step=None, loss_residual_early=None, loss_residual_final=None)
        residual = analysis.paired_residual(table, "test_loss", PREFIX)
        if not residual.empty:
            summary["early_step"] = analysis.early_step(list(residual.index), config.steps)
            summary["loss_residual_early"] = analysis.finite_mean(residual.loc[summary["early_step"]])
            summary["loss_residual_final"] = analysis.finite_mean(residual.iloc[-1])
        _figures(config, table, results, ctx)
        # Which of the seed's effects this run reproduced, in words (from the claims).
        summary["note"] = [f"{'reproduced' if c.held else 'NOT reproduced'}: {c.claim} "
                           f"({c.measured})" for c in self.claims(summary)]
        return summary

    def claims(self, summary: dict) -> list[Claim]:
        """Rise and fall of the unshifted bias-only similarity, shifted < unshifted, losses."""
        src = "seed 000 §3.2, Figs. 5, 18"
        u, s = summary.get("unshifted", {}), summary.get("shifted", {})
        claims: list[Claim] = []
        peak, first = u.get("similarity_peak"), u.get("similarity_first_trained")
        final, last_step = u.get("similarity_final"), u.get("final_step")
        if None not in (peak, first, final):
            rise = peak - first > RISE_FALL_MARGIN
            fall = peak - final > RISE_FALL_MARGIN and u.get("similarity_peak_step") != last_step
            claims.append(Claim(
                "unshifted: the bias-only reconstruction first approaches the full one, then "
                f"diverges from it (rise and fall each > {RISE_FALL_MARGIN} in correlation)",
                f"correlation {fmt_or_na(first)} (step {u.get('first_trained_step')}) -> peak "
                f"{fmt_or_na(peak)} (step {u.get('similarity_peak_step')}) -> {fmt_or_na(final)} "
                f"(step {last_step})", bool(rise and fall), src,
                id=claim_id(self.name, "unshifted", "bias-similarity-rises-and-falls"),
                value=peak - final, comparison="compound", threshold=RISE_FALL_MARGIN))
        if u.get("similarity_peak") is not None and s.get("similarity_peak") is not None:
            claims.append(Claim(
                "shifted: the bias component carries less image content (lower peak "
                "similarity of bias-only to full reconstruction)",
                f"peak correlation {fmt_or_na(s['similarity_peak'])} shifted vs "
                f"{fmt_or_na(u['similarity_peak'])} unshifted" + _scale_aware_text(s, u),
                s["similarity_peak"] < u["similarity_peak"], src,
                id=claim_id(self.name, "shifted", "lower-bias-peak-similarity"),
                value=s["similarity_peak"], comparison="<", threshold=u["similarity_peak"]))
        early = summary.get("loss_residual_early")
        if early is not None:
            claims.append(Claim(
                "shifted model has a higher reconstruction loss early in training",
                f"loss residual (shifted - unshifted) {fmt_or_na(early)} at step "
                f"{summary.get('early_step')}", early > 0, "seed 000 App. D, Fig. 17",
                id=claim_id(self.name, "shifted", "higher-early-loss"), value=early,
                comparison=">", threshold=0.0))
        fu, fs = summary.get("final_loss_unshifted"), summary.get("final_loss_shifted")
        if fu is not None and fs is not None:
            claims.append(Claim(
                "shifted model reaches a lower final reconstruction loss",
                f"test MSE {fmt_or_na(fs, 4)} shifted vs {fmt_or_na(fu, 4)} unshifted", fs < fu,
                "seed 000 App. D, Fig. 17", id=claim_id(self.name, "shifted", "lower-final-loss"),
                value=fs, comparison="<", threshold=fu))
        return claims


def _scale_aware_text(shifted: dict, unshifted: dict) -> str:
    """The scale-aware measures beside the correlation (final R² and energy of the bias-only
    decode against the full decode), when the summary has them."""
    keys = ("bias_r2_final", "bias_energy_final")
    if any(shifted.get(k) is None or unshifted.get(k) is None for k in keys):
        return ""
    return (f"; at the end, R² of bias-only vs full {fmt_or_na(shifted['bias_r2_final'])} shifted vs "
            f"{fmt_or_na(unshifted['bias_r2_final'])} unshifted, energy "
            f"{fmt_or_na(shifted['bias_energy_final'])} vs {fmt_or_na(unshifted['bias_energy_final'])}")
