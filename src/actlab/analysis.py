"""Reading paired-condition results out of the tidy metrics table.

Experiments that compare two conditions over training (unshifted vs shifted students,
autoencoders, ViTs) log steps on a geometric-then-linear grid and read per-seed curves,
final values, crossover steps and hidden-state overshoot (how far a trajectory goes past
where it ends, :func:`trajectory_overshoot`) from the table
``run, seed, step, layer, metric, value``. These helpers do that once, for all of them.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

import numpy as np

from actlab.plotting import pyplot  # noqa: F401 - re-exported for experiments


def log_steps(total: int, points: int, also: Sequence[int] = ()) -> list[int]:
    """Logging steps: 0, a geometric series (early dynamics) and a linear one (late), plus ``also``."""
    geometric = np.unique(np.round(np.geomspace(1, total, points // 2)).astype(int))
    linear = np.unique(np.round(np.linspace(0, total, points - points // 2 + 1)).astype(int))
    steps = set(geometric.tolist()) | set(linear.tolist()) | {0, total}
    steps |= {int(s) for s in also if 0 <= s <= total}
    return sorted(steps)


def final_values(table: Any, run: str, metric: str = "eval_loss") -> Any:
    """Per-seed value of ``metric`` at the last logged step of ``run`` (a pandas Series)."""
    rows = table[(table.run == run) & (table.metric == metric) & (table.layer == "")]
    if rows.empty:
        return rows.value
    last = rows.step.max()
    return rows[rows.step == last].set_index("seed").value.sort_index()


def curves(table: Any, run: str, metric: str = "eval_loss", layer: str = "") -> Any:
    """A ``steps x seeds`` pivot of ``metric`` for ``run`` (and ``layer``)."""
    rows = table[(table.run == run) & (table.metric == metric) & (table.layer == layer)]
    return rows.pivot_table(index="step", columns="seed", values="value", aggfunc="first")


def value_at(curve: Any, step: float) -> Any:
    """Row of a steps x seeds pivot at the logged step nearest ``step``."""
    index = np.asarray(curve.index)
    return curve.iloc[int(np.argmin(np.abs(index - step)))]


def crossover_steps(unshifted: Any, shifted: Any) -> list[float]:
    """Per seed: the first logged step from which the shifted loss stays below the unshifted.

    ``nan`` for a seed whose shifted student does not end lower.
    """
    out = []
    for seed in unshifted.columns:
        below = (shifted[seed] < unshifted[seed]).to_numpy()
        if not below[-1]:
            out.append(math.nan)
            continue
        above = np.flatnonzero(~below)
        first = 0 if above.size == 0 else above[-1] + 1
        out.append(float(unshifted.index[first]))
    return out


def trajectory_overshoot(values: Sequence[float] | np.ndarray,
                         steps: Sequence[float] | np.ndarray | None = None) -> tuple[float, float]:
    """Overshoot of one trajectory ``h_0 .. h_T`` and the step of its peak.

    The hidden-state overshoot of "Rethinking Activation Functions" (§2.2, Fig. 2, Fig. 7(a),
    App. E.2) is a transient that recedes: the trajectory goes past where it ends and comes
    back. With the direction of travel ``s = sign(h_T - h_0)`` (when ``h_T == h_0``, the sign
    of the largest excursion ``h_t - h_0``), the overshoot is

        ``max(0, max_t s * (h_t - h_T))``

    — how far the trajectory goes beyond its final value, on the far side from its start. A
    monotone approach from ``h_0`` to ``h_T`` gives exactly 0; ``0 -> 2 -> 1`` gives 1.

    Returns ``(overshoot, peak step)``: the peak step is ``steps[t]`` at the first ``t`` where
    the maximum is reached (the position ``t`` when ``steps`` is None), and ``nan`` when the
    overshoot is 0 (there is no peak). NaN entries are steps not logged and are skipped
    (``h_0`` is the first logged value); the result is ``(nan, nan)`` when the final value
    ``h_T`` is NaN (as the old peak deviation from the final value was), when any value is
    infinite (a diverged run), or when fewer than two values are logged.
    """
    h = np.asarray(values, dtype=float)
    t = np.arange(len(h), dtype=float) if steps is None else np.asarray(steps, dtype=float)
    if h.ndim != 1 or t.shape != h.shape:
        raise ValueError(f"need a 1-D trajectory and as many steps, got {h.shape} and {t.shape}")
    logged = ~np.isnan(h)
    if len(h) == 0 or not logged[-1] or np.isinf(h).any() or logged.sum() < 2:
        return math.nan, math.nan
    h, t = h[logged], t[logged]
    start, end = h[0], h[-1]
    direction = np.sign(end - start)
    if direction == 0:
        excursion = h - start
        direction = np.sign(excursion[np.argmax(np.abs(excursion))])
    past = direction * (h - end)
    peak = int(np.argmax(past))
    if not past[peak] > 0:
        return 0.0, math.nan
    return float(past[peak]), float(t[peak])


def _overshoots(trajectory: Any) -> Any:
    """Per column of a ``steps x seeds`` frame: a two-row frame ``overshoot``, ``step``."""
    import pandas as pd

    if isinstance(trajectory, pd.Series):
        trajectory = trajectory.to_frame()
    steps = np.asarray(trajectory.index, dtype=float)
    rows = {seed: trajectory_overshoot(trajectory[seed].to_numpy(dtype=float), steps)
            for seed in trajectory.columns}
    return pd.DataFrame(rows, index=["overshoot", "step"], columns=trajectory.columns,
                        dtype=float)


def overshoot(trajectory: Any) -> Any:
    """Per seed, the overshoot of a ``steps x seeds`` trajectory (a Series indexed by seed).

    ``max(0, max_t s * (h_t - h_T))`` with ``s = sign(h_T - h_0)``: how far each seed's
    trajectory goes past its final value, on the far side from its start (0 for a monotone
    approach); see :func:`trajectory_overshoot` for the tie and NaN rules.
    """
    return _overshoots(trajectory).loc["overshoot"]


def overshoot_peak_step(trajectory: Any) -> Any:
    """Per seed, the step (index value of the ``steps x seeds`` frame) where the overshoot of
    :func:`overshoot` peaks; ``nan`` for a seed without an overshoot (see
    :func:`trajectory_overshoot`)."""
    return _overshoots(trajectory).loc["step"]


def finite_mean(values: Any) -> float | None:
    """Mean of the finite entries (``None`` if there are none), as a JSON-friendly float."""
    arr = np.asarray(values, dtype=float)
    arr = arr[np.isfinite(arr)]
    return float(arr.mean()) if arr.size else None


def mean_and_sd(values: Any) -> tuple[float | None, float | None]:
    """Mean and sample sd (ddof 1) of the finite ``values``; ``None`` where too few for either."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    return (float(v.mean()) if len(v) else None, float(v.std(ddof=1)) if len(v) > 1 else None)


def mean_or_nan(values: Sequence[float]) -> float:
    """Mean of ``values``; nan when there are none."""
    return float(statistics.fmean(values)) if len(values) else float("nan")


def sd_or_nan(values: Sequence[float]) -> float:
    """Sample standard deviation of ``values``; nan with fewer than two."""
    return float(statistics.stdev(values)) if len(values) > 1 else float("nan")


def seeds_in(table: Any) -> list[int]:
    """The sorted seeds that have rows in the tidy ``table``."""
    return sorted({int(s) for s in table["seed"]})


def failed_units(results: list[dict[str, Any]]) -> list[Any]:
    """The units of the runner's ``results`` whose status is not ``ok``."""
    from actlab.train.loop import STATUS_OK

    return [r["unit"] for r in results if r["status"] != STATUS_OK]


def finite_median(values: Any) -> float | None:
    """Median of the finite entries (``None`` if there are none)."""
    arr = np.asarray(values, dtype=float)
    arr = arr[np.isfinite(arr)]
    return float(np.median(arr)) if arr.size else None


def pd_frame(columns: dict[float, Any]) -> Any:
    """A DataFrame from ``{column: Series}`` (seeds as rows)."""
    import pandas as pd

    return pd.DataFrame(columns)


def paired_residual(table: Any, metric: str, prefix: str,
                    layer: str = "") -> Any:
    """``shifted - unshifted`` per seed (steps x seeds) of ``metric``, on the common steps."""
    u = curves(table, f"{prefix}/unshifted", metric, layer)
    s = curves(table, f"{prefix}/shifted", metric, layer)
    return (s - u).dropna(how="all")


def early_step(steps: list[int] | np.ndarray, total: int, fraction: float = 0.05) -> int:
    """The logged step nearest ``fraction`` of training (the early-phase comparison point)."""
    steps = np.asarray([s for s in steps if s > 0])
    return int(steps[np.argmin(np.abs(steps - fraction * total))]) if steps.size else 0


# ------------------------------------------------------------------ per-layer probe rows
def layer_number(label: str, prefix: str = "layer") -> int:
    """``"layer3"`` -> 3 (``prefix`` then digits); -1 for any other label, e.g. ``""``."""
    rest = label[len(prefix):] if label.startswith(prefix) else ""
    return int(rest) if rest.isdigit() else -1


def finite_or_none(value: float | None) -> float | None:
    """``value`` as a float, or ``None`` when it is missing or not finite (JSON-friendly)."""
    return float(value) if value is not None and math.isfinite(value) else None


def mean_value(rows: Any) -> float | None:
    """Mean of ``rows["value"]`` over all its rows (seeds, layers; NaN skipped as pandas does).

    ``None`` when there are no rows or the mean is not finite.
    """
    return finite_or_none(float(rows["value"].mean())) if len(rows) else None


def at_step(rows: Any, which: str = "last") -> Any:
    """The rows at the ``"first"`` or ``"last"`` logged step of ``rows``."""
    if which not in ("first", "last"):
        raise ValueError(f"which must be 'first' or 'last', got {which!r}")
    step = rows["step"].min() if which == "first" else rows["step"].max()
    return rows[rows["step"] == step]


def change_per_layer(rows: Any, metric: str) -> dict[str, float]:
    """Per layer, the mean over seeds of ``metric``'s last minus first logged value."""
    out: dict[str, float] = {}
    for layer, part in rows[rows["metric"] == metric].groupby("layer"):
        per_seed = part.sort_values("step").groupby("seed")["value"].agg(
            lambda v: v.iloc[-1] - v.iloc[0])
        out[str(layer)] = float(per_seed.mean())
    return out


# --------------------------------------------------------------------------- figures


COLORS = {"unshifted": "tab:blue", "shifted": "tab:red"}


def plot_pair_curves(ax, table: Any, prefix: str, metric: str = "eval_loss", layer: str = "",
                     log: bool = True) -> None:
    """Thin per-seed and thick mean curves of both students on one axis."""
    for cond, color in COLORS.items():
        curve = curves(table, f"{prefix}/{cond}", metric, layer)
        if curve.empty:
            continue
        x = np.maximum(np.asarray(curve.index, dtype=float), 1) if log else curve.index
        ax.plot(x, curve.to_numpy(), color=color, alpha=0.2, lw=0.7)
        ax.plot(x, curve.mean(axis=1).to_numpy(), color=color, lw=2, label=cond)
    if log:
        ax.set_xscale("log")
        if metric == "eval_loss":
            ax.set_yscale("log")
    ax.set_xlabel("step")


def symlog_steps(ax: Any) -> None:
    """A step axis that shows step 0 and is logarithmic from step 10 on; it starts at 0, since
    a symlog axis would otherwise pad into negative decades that no step has."""
    ax.set_xscale("symlog", linthresh=10)
    ax.set_xlim(left=0)


def plot_residual(ax: Any, residual: Any) -> None:
    """Per-seed (thin grey) and mean (thick black) ``shifted - unshifted`` on a log step axis.

    ``residual`` is a steps x seeds frame such as :func:`paired_residual` returns.
    """
    x = np.maximum(residual.index.to_numpy(dtype=float), 1)
    ax.plot(x, residual.to_numpy(), color="gray", alpha=0.4, lw=0.7)
    ax.plot(x, residual.mean(axis=1).to_numpy(), color="black", lw=2)
    ax.axhline(0, color="k", lw=0.5, ls="--")
    ax.set_xscale("log")
    ax.set_xlabel("step")
