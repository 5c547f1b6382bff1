"""The ``sparsity`` summary: the points, their accuracy normalised per group, the cliff fit."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from actlab.analysis import failed_units, seeds_in
from actlab.experiments.sparsity.channel import channel_summary
from actlab.experiments.sparsity.claims import FLAT_RANGE, GPT, LEVEL_SLACK, METHODS, PUBLISHED
from actlab.experiments.sparsity.topk_drift import drift_summary
from actlab.recipes.image_classifier import data_label

if TYPE_CHECKING:
    from actlab.experiments.sparsity import SparsityConfig
    from actlab.theory.fit import CliffFit


def table_points(table: pd.DataFrame) -> list[dict[str, Any]]:
    """One point per run with finite accuracy and sparsity (seed means), in run order."""
    points = []
    for run, df in table.groupby("run"):
        model, method, level = str(run).split("/")
        values = df.groupby("metric")["value"].mean()
        if not all(math.isfinite(values.get(k, math.nan)) for k in ("accuracy", "sparsity")):
            continue
        points.append({"model": model, "method": method, "level": float(level),
                       "accuracy": float(values["accuracy"]),
                       "neg_frac": float(values.get("neg_frac", math.nan)),
                       "sparsity": float(values["sparsity"])})
    return points


def build_summary(config: SparsityConfig, table: pd.DataFrame,
                  results: list[dict[str, Any]]) -> dict[str, Any]:
    """``summary.json``: the scale, the published fit, ours (``None`` under 3 points), the
    per-model extremes and the sorted points (with ``normalized_accuracy`` once fitted)."""
    from actlab.theory.fit import fit_cliff, normalize_by_group

    all_points = table_points(table)
    frozen = frozen_comparison(config, table, all_points)
    points = [p for p in all_points if p["method"] in METHODS]  # the fit's mechanisms
    summary: dict[str, Any] = {
        "scale": {"steps": config.steps, "seeds": seeds_in(table),
                  "data": data_label(config, "digits (1438 train / 359 test)"),
                  "models": config.models,
                  "percentile_levels": config.percentile_levels,
                  "topk_levels": config.topk_levels},
        "failed_or_diverged": failed_units(results),
        "published": dict(PUBLISHED),
        "frozen_topk": frozen,
    }
    if any(str(run).startswith(f"{GPT}/") for run in table["run"].unique()):
        summary["gpt"] = gpt_summary(config, table)
    summary["topk_drift"] = drift_summary(table)  # Fig. 8; None without its runs
    summary["topk_channel"] = channel_summary(all_points)  # App. B.2; None without its runs
    if len(points) >= 3:
        norm = normalize_by_group([p["accuracy"] for p in points],
                                  [(p["model"], p["method"]) for p in points])
        for p, value in zip(points, norm):
            p["normalized_accuracy"] = float(value)
        fit = fit_cliff([p["sparsity"] for p in points], norm)
        summary.update({"A": fit.A, "B": fit.B, "N": fit.N, "r2": fit.r2,
                        "cliff_sparsity": fit.cliff_sparsity, "n_points": fit.n_points})
        summary["mechanism_fit"] = mechanism_fit(points, norm, fit)
        summary["per_model"] = per_model(points)
    else:
        summary.update({"A": None, "B": None, "N": None, "r2": None, "cliff_sparsity": None,
                        "mechanism_fit": None})
    summary["points"] = sorted(points, key=lambda p: (p["model"], p["method"], p["level"]))
    return summary


def mechanism_fit(points: list[dict[str, Any]], norm: np.ndarray, power_law: CliffFit
                  ) -> dict[str, Any] | None:
    """§4.1's mechanism indicator added to the power law (:func:`~actlab.theory.fit.
    fit_cliff_indicator`, ``m = 1`` for Top-K): its parameters and R² beside the power law's,
    and the R² of the indicator alone (each mechanism's mean), which the sparsity term must
    beat to stay "the dominant determinant". ``None`` unless both mechanisms have points."""
    from actlab.theory.fit import fit_cliff_indicator, r_squared

    m = np.array([1.0 if p["method"] == "topk" else 0.0 for p in points])
    if len(points) < 4 or m.min() == m.max():
        return None
    fit = fit_cliff_indicator([p["sparsity"] for p in points], norm, m, base=power_law)
    r2 = power_law.r2
    keep = np.isfinite(norm)
    y, mk = np.asarray(norm, dtype=float)[keep], m[keep]
    means = np.where(mk == 1, y[mk == 1].mean(), y[mk == 0].mean())
    return {"A": fit.A, "B": fit.B, "N": fit.N, "C": fit.C, "r2": fit.r2,
            "r2_power_law": r2, "r2_gain": fit.r2 - r2,
            "r2_indicator_only": r_squared(y, means), "n_points": fit.n_points,
            "indicator": "1 for Top-K, 0 for Percentile Centering"}


def per_model(points: list[dict[str, Any]]) -> dict[str, Any]:
    """Per (model, method): accuracy at the lowest and highest measured sparsity."""
    out: dict[str, Any] = {}
    for model in sorted({p["model"] for p in points}):
        for method in METHODS:
            sel = sorted((p for p in points if p["model"] == model and p["method"] == method),
                         key=lambda p: p["sparsity"])
            if sel:
                out[f"{model}/{method}"] = {
                    "least_sparse": {"sparsity": sel[0]["sparsity"], "accuracy": sel[0]["accuracy"]},
                    "most_sparse": {"sparsity": sel[-1]["sparsity"], "accuracy": sel[-1]["accuracy"]},
                }
    return out


def frozen_comparison(config: SparsityConfig, table: pd.DataFrame,
                      points: list[dict[str, Any]]) -> dict[str, Any]:
    """The frozen-threshold Top-K points against exact Top-K at the same (model, level): the
    accuracy difference, the kept fraction at evaluation (1 - sparsity) and over training
    (seed means at ten evenly spaced steps, and the mean after the warm-up)."""
    exact = {(p["model"], p["level"]): p for p in points if p["method"] == "topk"}
    kept = table[table["metric"] == "kept_fraction"]
    pairs = []
    for p in points:
        if p["method"] != "topk-frozen" or (p["model"], p["level"]) not in exact:
            continue
        ref = exact[(p["model"], p["level"])]
        run = kept[kept["run"] == f"{p['model']}/topk-frozen/{p['level']:g}"]
        by_step = run.groupby("step")["value"].mean()
        after = by_step[by_step.index > config.topk_freeze_after]
        picks = sorted({int(i) for i in np.linspace(1, len(by_step), 10)}) if len(by_step) else []
        pairs.append({
            "model": p["model"], "level": p["level"], "exact_accuracy": ref["accuracy"],
            "frozen_accuracy": p["accuracy"], "difference": p["accuracy"] - ref["accuracy"],
            "kept_eval": 1.0 - p["sparsity"],
            "kept_after_warmup": float(after.mean()) if len(after) else math.nan,
            "kept_over_training": [[step, float(by_step.iloc[step - 1])] for step in picks],
        })
    return {"freeze_after": config.topk_freeze_after, "tolerance": config.frozen_tolerance,
            "pairs": pairs}


def gpt_points(table: pd.DataFrame) -> list[dict[str, Any]]:
    """One point per GPT run with a finite loss (seed means), by method and level; the
    sparsity a level aims at is ``target`` (``q`` for Percentile Centering, ``1 - K`` for
    Top-K)."""
    points = []
    for run, df in table[table["run"].astype(str).str.startswith(f"{GPT}/")].groupby("run"):
        _, method, level = str(run).split("/")
        values = df.groupby("metric")["value"].mean()
        if not math.isfinite(values.get("test_loss", math.nan)):
            continue
        level_f = float(level)
        points.append({"method": method, "level": level_f,
                       "target": level_f if method == "percentile" else 1.0 - level_f,
                       "loss": float(values["test_loss"]),
                       "neg_frac": float(values.get("neg_frac", math.nan)),
                       "sparsity": float(values.get("sparsity", math.nan)),
                       "seeds": int(df["seed"].nunique())})
    return sorted(points, key=lambda p: (p["method"], p["sparsity"]))


def gpt_summary(config: SparsityConfig, table: pd.DataFrame) -> dict[str, Any]:
    """The GPT rows: points, the loss rise inside the paper's flat range (11 % to 77 %
    sparsity, each end widened by ``LEVEL_SLACK``), the flat region (the run of points,
    neighbours in sparsity, around the lowest loss whose losses stay within
    ``gpt_loss_tolerance`` of it; both methods pooled, as the paper states its range) and the frozen-threshold Top-K against exact Top-K."""
    points = gpt_points(table)
    exact = sorted((p for p in points if p["method"] in METHODS), key=lambda p: p["sparsity"])
    out: dict[str, Any] = {"points": points, "tolerance": config.gpt_loss_tolerance,
                           "flat_range": list(FLAT_RANGE)}
    lo, hi = FLAT_RANGE[0] - LEVEL_SLACK, FLAT_RANGE[1] + LEVEL_SLACK
    inside = [p for p in exact if lo <= p["sparsity"] <= hi]
    if inside:
        losses = [p["loss"] for p in inside]
        out["flat_range_rise"] = max(losses) - min(losses)
        out["flat_range_mean_loss"] = float(np.mean(losses))
        out["flat_range_points"] = len(inside)
    if exact:
        # the run of neighbouring sparsities around the best point whose every point lies
        # within tolerance of it (points of equal sparsity, e.g. q = 0.3 and K = 0.7, count
        # as one, with the higher loss)
        worst_at: dict[float, float] = {}
        for p in exact:
            key = round(p["sparsity"], 6)
            worst_at[key] = max(worst_at.get(key, -math.inf), p["loss"])
        sparsities = sorted(worst_at)
        best = min(exact, key=lambda p: p["loss"])
        within = [worst_at[key] <= best["loss"] + config.gpt_loss_tolerance for key in sparsities]
        first = last = sparsities.index(round(best["sparsity"], 6))
        if within[first]:
            while first > 0 and within[first - 1]:
                first -= 1
            while last + 1 < len(sparsities) and within[last + 1]:
                last += 1
            flat = sparsities[first:last + 1]
        else:  # a point of the best one's sparsity lies beyond the tolerance
            flat = []
        out["flat_from"] = flat[0] if flat else None
        out["flat_until"] = flat[-1] if flat else None
        out["flat_width"] = flat[-1] - flat[0] if flat else 0.0
        out["most_sparse"] = {k: exact[-1][k] for k in ("method", "level", "sparsity", "loss")}
    reference = {p["level"]: p for p in points if p["method"] == "topk"}
    out["frozen_pairs"] = [
        {"level": p["level"], "exact_loss": reference[p["level"]]["loss"],
         "frozen_loss": p["loss"], "difference": p["loss"] - reference[p["level"]]["loss"],
         "kept_eval": 1.0 - p["sparsity"]}
        for p in points if p["method"] == "topk-frozen" and p["level"] in reference]
    return out
