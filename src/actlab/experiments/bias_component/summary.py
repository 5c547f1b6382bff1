"""Summary of ``bias-component``: per-model similarity landmarks and the loss residual."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pandas as pd

from actlab import analysis

if TYPE_CHECKING:
    from actlab.experiments.bias_component import BiasComponentConfig

PREFIX = "ae"
# "shifted" measures b at initialisation (the claims' model); "shifted-theory" uses b = 0.23.
CONDITIONS = ("unshifted", "shifted", "shifted-theory")
SHIFT_METRIC = "activation_shift"  # rows at step 0, one per activation (layer = module name)
# Per-model summary keys; None when no checkpoint qualifies (see describe_condition).
LANDMARKS = ("similarity_peak_step", "similarity_peak", "similarity_final", "final_loss",
             "first_trained_step", "similarity_first_trained")


def describe_condition(table: pd.DataFrame, run: str, min_fit: float = 0.5) -> dict[str, Any]:
    """Similarity trajectory landmarks (seed-mean curve) and the final loss of one model.

    The landmarks (first, peak, final) use only the checkpoints at which the mean held-out
    loss is at most ``min_fit`` times its step-0 value: before that the "full
    reconstruction" is not yet an image, and an untrained decoder maps ``h`` and ``h_bias``
    to nearly the same blur (correlation near 1 at step 0, an artefact, not information).
    """
    sim = analysis.curves(table, run, "bias_correlation")
    loss = analysis.curves(table, run, "test_loss")
    out: dict[str, Any] = dict.fromkeys(LANDMARKS)
    if sim.empty or loss.empty:
        return {**out, "status": "missing"}
    mean = sim.mean(axis=1)
    mean_loss = loss.mean(axis=1)
    fitted = mean_loss.index[(mean_loss <= min_fit * mean_loss.iloc[0]) & (mean_loss.index > 0)]
    trained = mean[mean.index.isin(fitted)].dropna()
    out.update({
        "similarity_initial": analysis.finite_mean([mean.iloc[0]]),
        "final_step": int(mean.index[-1]),
        "final_loss": analysis.finite_mean(loss.iloc[-1]),
        "seeds": int(sim.shape[1]),
    })
    if not trained.empty:
        out.update(similarity_peak_step=int(trained.idxmax()),
                   similarity_peak=float(trained.max()),
                   similarity_final=float(trained.iloc[-1]),
                   first_trained_step=int(trained.index[0]),
                   similarity_first_trained=float(trained.iloc[0]))
    out["latent_mean_initial"] = _initial(table, run, "latent_mean")
    shifts = table[(table.run == run) & (table.metric == SHIFT_METRIC)]
    out["shifts"] = {layer: float(group.value.mean())
                     for layer, group in shifts.groupby("layer", sort=False)}
    for metric, key in (("dev_correlation", "dev_similarity_final"),
                        ("bias_input_correlation", "bias_input_correlation_final"),
                        ("bias_psnr", "bias_psnr_final"), ("bias_share", "bias_share_final"),
                        ("bias_r2", "bias_r2_final"), ("bias_energy", "bias_energy_final")):
        curve = analysis.curves(table, run, metric)
        if not curve.empty:
            out[key] = analysis.finite_mean(curve.iloc[-1])
    return out


def _initial(table: pd.DataFrame, run: str, metric: str) -> float | None:
    """The seed mean of ``metric`` at step 0 (``None`` when it was not logged)."""
    curve = analysis.curves(table, run, metric)
    if curve.empty or curve.index[0] != 0:
        return None
    return analysis.finite_mean(curve.iloc[0])


def build_summary(config: BiasComponentConfig, table: pd.DataFrame,
                  results: list[dict[str, Any]]) -> dict[str, Any]:
    """``summary.json`` (without its ``note``): landmarks per model, final losses, residuals."""
    dataset = next((r["data"].get("dataset") for r in results if r["data"]), None)
    summary: dict[str, Any] = {
        "data": dataset or ("cifar10" if config.data_dir else "digits"),
        "similarity": "correlation",
        "scale": {"steps": config.steps, "batch_size": config.batch_size,
                  "widths": list(config.widths), "convs_per_stage": config.convs_per_stage,
                  "init": config.init,
                  "image_size": 32 if config.data_dir else config.image_size,
                  "optimizer": f"{config.optimizer} lr={config.lr:g}",
                  "calibration_batches": config.calibration_batches,
                  "seeds": analysis.seeds_in(table) if len(table) else []},
        "failed_units": analysis.failed_units(results),
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
        theory = (analysis.curves(table, f"{PREFIX}/shifted-theory", "test_loss")
                  - analysis.curves(table, f"{PREFIX}/unshifted", "test_loss")).dropna(how="all")
        if not theory.empty:
            summary["loss_residual_early_theory"] = analysis.finite_mean(
                analysis.value_at(theory, summary["early_step"]))
            summary["loss_residual_final_theory"] = analysis.finite_mean(theory.iloc[-1])
    return summary
