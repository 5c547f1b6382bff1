"""The ``gn-bounds`` summary: per checkpoint the seed means of every one-block number, the
worst checkpoints the claims judge, theorem violations, and eq. 49's numbers per time."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from actlab.analysis import curves, finite_mean, seeds_in

if TYPE_CHECKING:
    from actlab.experiments.gn_bounds import GnBoundsConfig

ONE_BLOCK, JOINT = "one-block", "joint"
# "After 100 updates" (App. B.1.3, Fig. 11): the first update the Hessian claim judges.
FIG11_AFTER = 100
CURVE_METRICS = (
    "mu_bar",
    "lambda_a",
    "lambda_b_mu",
    "lambda_g_mu",
    "lambda_g_star",
    "b_star",
    "ratio_mu_star",
    "upper_gap_max",
    "lower_gap_max",
    "upper_gap_median",
    "lower_gap_median",
    "eps_sq",
    "lambda_h_mu",
    "lambda_gn_mu",
    "h_minus_g_norm",
    "residual_bound",
    "hg_rel_diff",
    "loss_train_shift",
    "loss_mu",
)
SEED_MAX = ("ratio_mu_star", "upper_gap_max", "lower_gap_max", "hg_rel_diff")
VIOLATIONS = ("violations_eq37", "violations_eq38", "violations_eq46")
JOINT_METRICS = (
    "lambda_unshifted",
    "lambda_theory_shift",
    "lambda_global_mean",
    "lambda_layer_means",
    "lambda_floor",
    "eps_sq",
    "layer_means_over_floor",
    "mean_activation",
)


def _worst(
    values: list[float | None], steps: list[int], keep: Any = lambda s: True
) -> tuple[float | None, int | None]:
    """The largest finite value among the steps ``keep`` accepts, and its step."""
    pairs = [(v, s) for v, s in zip(values, steps) if v is not None and np.isfinite(v) and keep(s)]
    if not pairs:
        return None, None
    value, step = max(pairs)
    return float(value), int(step)


def one_block_summary(table: Any) -> dict[str, Any]:
    """The one-block part: per-step seed means (and sds), seed maxima, the worst steps."""
    rows = table[table["run"] == ONE_BLOCK]
    if rows.empty:
        return {}
    frames = {m: curves(table, ONE_BLOCK, m) for m in (*CURVE_METRICS, *VIOLATIONS)}
    steps = [int(s) for s in frames["mu_bar"].index]
    mean = {m: [finite_mean(frames[m].loc[s]) for s in steps] for m in CURVE_METRICS}
    sd = {
        m: [float(frames[m].loc[s].std(ddof=1)) if frames[m].shape[1] > 1 else None for s in steps]
        for m in CURVE_METRICS
    }
    seed_max = {m: [float(frames[m].loc[s].max()) for s in steps] for m in SEED_MAX}
    out: dict[str, Any] = {
        "steps": steps,
        "seeds": seeds_in(rows),
        "mean": mean,
        "sd": sd,
        "seed_max": seed_max,
    }
    for metric in ("upper_gap_max", "lower_gap_max", "ratio_mu_star"):
        out[f"{metric}_worst"], out[f"{metric}_worst_step"] = _worst(mean[metric], steps)
    out["ratio_mu_star_worst_any_seed"] = float(np.nanmax(frames["ratio_mu_star"].to_numpy()))
    out["hg_rel_after_worst"], out["hg_rel_after_worst_step"] = _worst(
        mean["hg_rel_diff"], steps, lambda s: s >= FIG11_AFTER
    )
    out["hg_rel_before_worst"], _ = _worst(mean["hg_rel_diff"], steps, lambda s: s < FIG11_AFTER)
    out["steps_after"] = [s for s in steps if s >= FIG11_AFTER]
    out["violations"] = {
        m.removeprefix("violations_"): int(np.nansum(frames[m].to_numpy())) for m in VIOLATIONS
    }
    out["points"] = int(frames["mu_bar"].notna().to_numpy().sum())
    out["b_star_at_edge"] = int(np.nansum(curves(table, ONE_BLOCK, "b_star_at_edge").to_numpy()))
    out["fixed_gates"] = bool(np.all(curves(table, ONE_BLOCK, "fixed_gates").to_numpy() == 1))
    return out


def joint_summary(table: Any) -> dict[str, Any]:
    """The joint part: seed means of eq. 49's numbers at initialisation and after training."""
    rows = table[table["run"] == JOINT]
    if rows.empty:
        return {}
    steps = sorted(int(s) for s in rows["step"].unique())
    out: dict[str, Any] = {"seeds": seeds_in(rows), "steps": steps}
    for label, step in (("init", steps[0]), ("trained", steps[-1])):
        at = rows[rows["step"] == step]
        out[label] = {m: finite_mean(at[at["metric"] == m]["value"]) for m in JOINT_METRICS}
        ratios = at[at["metric"] == "layer_means_over_floor"]["value"]
        out[label]["layer_means_over_floor_max"] = float(ratios.max()) if len(ratios) else None
    viol = rows[rows["metric"] == "violations_eq49"]["value"]
    out["violations_eq49"] = int(viol.sum())
    return out


def build_summary(config: GnBoundsConfig, table: Any) -> dict[str, Any]:
    """``{"scale", "one_block", "joint"}``; see :func:`one_block_summary`, :func:`joint_summary`."""
    scale = {
        "activation": config.activation,
        "student": config.student,
        "train_shift": config.train_shift,
        "d": config.d,
        "m": config.m,
        "steps": config.steps,
        "optimizer": config.optimizer,
        "lr": config.lr,
        "batch_size": config.batch_size,
        "n_curvature": config.n_curvature,
        "sweep_halfwidth": config.sweep_halfwidth,
        "sweep_points": config.sweep_points,
        "joint_blocks": config.joint_blocks,
        "seeds": seeds_in(table) if len(table) else [],
    }
    return {"scale": scale, "one_block": one_block_summary(table), "joint": joint_summary(table)}
