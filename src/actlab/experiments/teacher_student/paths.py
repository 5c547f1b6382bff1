"""Figs. 3, 4, 8 and 15 of "Rethinking Activation Functions" in numbers, per activation, from
the tidy rows of a teacher-student run: what the summary judges "throughout training".

- :func:`sharpness_paths` (Fig. 4): the leading Hessian eigenvalues of both students at every
  curvature point.
- :func:`plane_numbers` (Fig. 3, §2.3): each seed's trajectory on its initial-gradient plane:
  the turn between the early and the later displacement there, the share of the displacement
  outside the plane (eq. 5), and the loss range each student sees on seed 0's drawn plane.
- :func:`block_numbers` (Figs. 8 and 15): the post-activation means of every block and the
  hidden-state overshoot of every block.
- :func:`update_numbers` (what sets Fig. 2's order, ours): how far each block's parameters
  moved by the early step and by the end, per student.

Each value is a mean over seeds; the runner's per-seed summaries give the samples the claims
are judged on.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from actlab.analysis import curves, finite_mean, overshoot, overshoot_peak_step, value_at


def sharpness_paths(table: Any, activation: str) -> dict[str, Any]:
    """Fig. 4 over training: the mean over the curvature seeds of the largest and of the
    smallest recorded leading Hessian eigenvalue at every curvature point, per student.

    ``sharpness_steps``; ``sharpness_{cond}_path`` (lambda_1) and ``sharpness_last_{cond}_path``
    (lambda_k, the k-th largest, k = ``sharpness_k``); ``hessian_matvecs_first`` and
    ``hessian_matvecs_later``, the mean Lanczos products at the first point (a random start)
    and at the later ones (warm-started when the run asked for it).
    """
    rows = table[table.run.isin([f"{activation}/unshifted", f"{activation}/shifted"])
                 & table.metric.str.startswith("lambda_") & (table.layer == "")]
    if rows.empty:
        return {}
    kinds = sorted({m for m in rows.metric.unique() if m.startswith("lambda_hessian_")},
                   key=lambda m: int(m.rsplit("_", 1)[1]))
    last = kinds[-1] if kinds else "lambda_max_hessian"
    steps = sorted(int(t) for t in rows[rows.metric == "lambda_max_hessian"].step.unique())
    out: dict[str, Any] = {"sharpness_steps": steps, "sharpness_k": 1 + len(kinds)}
    for cond in ("unshifted", "shifted"):
        for metric, key in (("lambda_max_hessian", f"sharpness_{cond}_path"),
                            (last, f"sharpness_last_{cond}_path")):
            these = rows[(rows.run == f"{activation}/{cond}") & (rows.metric == metric)]
            out[key] = [finite_mean(these[these.step == t].value) for t in steps]
    matvecs = table[table.run.str.startswith(activation + "/")
                    & (table.metric == "hessian_matvecs")]
    if not matvecs.empty:
        first = matvecs.step == matvecs.step.min()
        out["hessian_matvecs_first"] = finite_mean(matvecs[first].value)
        out["hessian_matvecs_later"] = finite_mean(matvecs[~first].value)
    return out


def turn_degrees(alpha: Any, beta: Any, early: int, last: int) -> np.ndarray:
    """Per seed, the angle (degrees) between the displacement on the plane up to row
    ``early`` and the one from ``early`` to row ``last`` of ``steps x seeds`` frames (0: the
    trajectory goes straight on; 180: it turns back). NaN for a seed whose trajectory has not
    moved in one of the two parts (a run whose early step is its last): no angle exists."""
    a, b = np.asarray(alpha, dtype=float), np.asarray(beta, dtype=float)
    v1 = np.stack([a[early], b[early]])
    v2 = np.stack([a[last] - a[early], b[last] - b[early]])
    with np.errstate(invalid="ignore", divide="ignore"):
        cos = (v1 * v2).sum(0) / (np.linalg.norm(v1, axis=0) * np.linalg.norm(v2, axis=0))
    return np.degrees(np.arccos(np.clip(cos, -1.0, 1.0)))


def plane_numbers(table: Any, activation: str, early_step: int,
                  landscape: dict[str, Any] | None = None) -> dict[str, Any]:
    """Fig. 3 per student: ``turn_{cond}`` (the trajectory's turn on the initial-gradient
    plane at ``early_step``, :func:`turn_degrees`), ``offplane_share_{cond}`` and
    ``offplane_share_final_{cond}`` (the share of the squared displacement outside the plane,
    eq. 5, at ``early_step`` and at the end) and, from seed 0's drawn landscape,
    ``plane_loss_range_{cond}`` (largest minus smallest loss on its grid)."""
    out: dict[str, Any] = {}
    for cond in ("unshifted", "shifted"):
        run = f"{activation}/{cond}"
        alpha, beta = curves(table, run, "plane_alpha"), curves(table, run, "plane_beta")
        dsq = curves(table, run, "displacement_sq")
        if alpha.empty:
            return {}
        early = int(np.argmin(np.abs(np.asarray(alpha.index) - early_step)))
        out[f"turn_{cond}"] = finite_mean(turn_degrees(alpha, beta, early, len(alpha) - 1))
        on_plane = alpha.to_numpy() ** 2 + beta.to_numpy() ** 2
        with np.errstate(invalid="ignore", divide="ignore"):
            share = 1.0 - on_plane / dsq.to_numpy()
        out[f"offplane_share_{cond}"] = finite_mean(share[early])
        out[f"offplane_share_final_{cond}"] = finite_mean(share[-1])
        grid = (landscape or {}).get(cond, {}).get("loss")
        if grid is not None:
            values = np.asarray(grid, dtype=float)
            out[f"plane_loss_range_{cond}"] = float(np.nanmax(values) - np.nanmin(values))
    out["plane_early_step"] = int(value_at(curves(table, f"{activation}/unshifted",
                                                  "plane_alpha"), early_step).name)
    return out


def block_numbers(table: Any, activation: str, blocks: int) -> dict[str, Any]:
    """Figs. 8 and 15 per student: ``post_act_abs_max_{cond}`` (per seed the largest
    |post-activation mean| over blocks and logged steps, then the mean over seeds),
    ``overshoot_blocks_{cond}`` and ``overshoot_step_blocks_{cond}`` (per block, the mean over
    seeds of the overshoot and of its peak step), ``overshoot_mean_blocks_{cond}`` and
    ``overshoot_block_share`` (the mean over seeds of the share of blocks where the unshifted
    student overshoots more than the shifted one)."""
    out: dict[str, Any] = {}
    per_block: dict[str, list[Any]] = {}
    for cond in ("unshifted", "shifted"):
        run = f"{activation}/{cond}"
        post = [curves(table, run, "post_act_mean", f"block{i}") for i in range(blocks)]
        if any(p.empty for p in post):
            return {}
        largest = np.nanmax(np.stack([np.abs(p.to_numpy()) for p in post]), axis=(0, 1))
        out[f"post_act_abs_max_{cond}"] = finite_mean(largest)
        hidden = [curves(table, run, "hidden_mean", f"block{i}") for i in range(blocks)]
        per_block[cond] = [overshoot(h) for h in hidden]
        out[f"overshoot_blocks_{cond}"] = [finite_mean(o) for o in per_block[cond]]
        out[f"overshoot_step_blocks_{cond}"] = [finite_mean(overshoot_peak_step(h))
                                                for h in hidden]
        out[f"overshoot_mean_blocks_{cond}"] = finite_mean(
            np.nanmean(np.stack([o.to_numpy() for o in per_block[cond]]), axis=0))
    more = np.stack([(u > s).to_numpy() for u, s in zip(per_block["unshifted"],
                                                          per_block["shifted"], strict=True)])
    out["overshoot_block_share"] = finite_mean(more.mean(axis=0))
    return out


def update_numbers(table: Any, activation: str, blocks: int, early_step: int) -> dict[str, Any]:
    """Per student and block, the mean over seeds of ``||theta_l(t) - theta_l(0)|| /
    ||theta_l(0)||`` at the logged step nearest ``early_step`` (``block_update_early_{cond}``)
    and at the last one (``block_update_final_{cond}``); empty for runs that predate it."""
    out: dict[str, Any] = {}
    for cond in ("unshifted", "shifted"):
        per_block = [curves(table, f"{activation}/{cond}", "block_update", f"block{i}")
                     for i in range(blocks)]
        if any(c.empty for c in per_block):
            return {}
        out[f"block_update_early_{cond}"] = [finite_mean(value_at(c, early_step))
                                             for c in per_block]
        out[f"block_update_final_{cond}"] = [finite_mean(c.iloc[-1]) for c in per_block]
    return out
