"""``size-sweep``: shifting's benefit across model sizes (seed 000, App. C.1-C.2, Figs. 12-13).

Two parts, both with ReLU by default:

* a grid over residual width ``d``, MLP width ``m`` and depth ``L``: the relative
  improvement ``(L_unshifted - L_shifted) / L_unshifted`` of the final loss, averaged over
  paired seeds, as one heat map per depth (Fig. 12);
* for a few representative sizes, each seed's empirically optimal shift (the ``b`` with the
  lowest final loss on a grid around the theory shift), as distributions (Fig. 13).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from actlab.errors import ConfigError
from actlab.experiments import _ts_common as ts
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


def parse_size(text: str) -> tuple[int, int, int]:
    """``"20x80x10"`` -> ``(20, 80, 10)``."""
    parts = text.lower().split("x")
    if len(parts) != 3 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise ConfigError("sizes", f"expected DxMxL with positive integers, got {text!r}")
    d, m, L = (int(p) for p in parts)
    return d, m, L


@dataclass
class Config(ts.ModelSettings):
    """Size-sweep settings.

    ``grid_d``/``grid_m``/``grid_L``: the heat-map grid (Fig. 12). ``sizes``: ``DxMxL``
    models for the optimal-shift distributions (Fig. 13), each trained with the shifts
    ``theory + shift_offsets``. The paper's grid and its 100 seeds per size are far beyond
    a laptop; the defaults are a smaller grid (see docs/teacher_student.md).
    """

    activation: str = "relu"
    grid_d: list[int] = field(default_factory=lambda: [10, 20, 40])
    grid_m: list[int] = field(default_factory=lambda: [20, 40, 80])
    grid_L: list[int] = field(default_factory=lambda: [5, 10])
    sizes: list[str] = field(default_factory=lambda: ["5x20x2", "20x80x10"])
    shift_offsets: list[float] = field(
        default_factory=lambda: [-0.2, -0.15, -0.1, -0.05, 0.0, 0.05, 0.1, 0.15, 0.2]
    )
    steps: int = 2000
    log_points: int = 10

    def __post_init__(self) -> None:
        self.validate()
        ts.validate_activations("activation", [self.activation])
        for name in ("grid_d", "grid_m", "grid_L"):
            values = getattr(self, name)
            if any(v < 1 for v in values):
                raise ConfigError(name, f"must be positive integers, got {values}")
        for size in self.sizes:
            parse_size(size)
        ts.validate_shift_offsets(self.shift_offsets)


@register
class SizeSweep(Experiment):
    """Relative improvement over a (d, m, L) grid and per-seed optimal shifts per size."""

    name: ClassVar[str] = "size-sweep"
    headline_figure: ClassVar[str | None] = "fig12_size_grid"
    description: ClassVar[str] = "Shifting's gain over (d, m, L) and optimal-shift distributions"
    Config: ClassVar[type] = Config
    quick: ClassVar[dict[str, Any]] = {
        "grid_d": [5, 10], "grid_m": [10, 40], "grid_L": [2, 4], "sizes": ["5x20x2", "10x40x4"],
        "steps": 600, "batch_size": 128, "eval_size": 256, "log_points": 4,
        "shift_offsets": [-0.15, -0.075, 0.0, 0.075, 0.15],
    }
    full: ClassVar[dict[str, Any]] = {
        "grid_d": [10, 20, 50], "grid_m": [20, 80, 200], "grid_L": [10, 20],
        "sizes": ["5x20x2", "20x80x10", "50x200x20"], "steps": 5000,
    }
    default_seeds: ClassVar[int] = 8
    seeds_per_unit: ClassVar[int | None] = None

    def units(self, config: Config) -> list[dict[str, Any]]:
        """One unit per grid cell and one per representative size."""
        grid = [{"part": "grid", "d": d, "m": m, "L": L}
                for L in config.grid_L for d in config.grid_d for m in config.grid_m]
        return grid + [{"part": "optimal", "size": s} for s in config.sizes]

    def run_unit(self, config: Config, unit: dict[str, Any], seeds: list[int],
                 ctx: UnitContext) -> UnitResult:
        """A grid cell trains the pair; a size trains the whole shift grid."""
        act = config.activation
        if unit["part"] == "grid":
            d, m, L = unit["d"], unit["m"], unit["L"]
            prefix = f"grid/{d}x{m}x{L}"
            conditions = {"unshifted": f"{act}:shift=0", "shifted": f"{act}:shift=theory"}
            data: dict[str, Any] = {}
        else:
            d, m, L = parse_size(unit["size"])
            prefix = f"optimal/{unit['size']}"
            shifts = ts.shift_conditions(act, config.shift_offsets, include_zero=False)
            conditions = {name: f"{act}:shift={b!r}" for name, b in shifts.items()}
            data = {"shifts": shifts, "theory_shift": ts.theory_shift(act)}
        settings = dataclasses.replace(config, d=d, m=m, L=L)
        run = ts.train_students(settings, act, conditions, seeds, progress=ctx.progress)
        result = UnitResult(data=data)
        run.add_rows(result, prefix, blocks=False)
        if any(x.any() for x in run.diverged.values()):
            result.status = STATUS_DIVERGED
        return result

    def summarize(self, config: Config, table: Any, results: list[dict[str, Any]],
                  ctx: RunContext) -> dict:
        """Heat maps of relative improvement and optimal-shift distributions."""
        summary: dict[str, Any] = {
            "scale": ts.describe_scale(
                config, len(results[0]["seeds"]) if results else 0,
                size=f"grid d {config.grid_d} x m {config.grid_m} x L {config.grid_L}, "
                f"sizes {config.sizes}",
            ),
        }
        plt = ts._pyplot()
        early = max(1, round(0.05 * config.steps))
        heat: dict[str, Any] = {}
        Ls = list(config.grid_L)
        fig, axes = plt.subplots(1, len(Ls), figsize=(4.8 * len(Ls), 3.8), squeeze=False,
                                 layout="constrained")
        for ax, L in zip(axes[0], Ls):
            grid = np.full((len(config.grid_d), len(config.grid_m)), np.nan)
            for i, d in enumerate(config.grid_d):
                for j, m in enumerate(config.grid_m):
                    pair = ts.pair_summary(table, f"grid/{d}x{m}x{L}", early)
                    if pair.get("relative_improvement") is not None:
                        grid[i, j] = pair["relative_improvement"]
                        heat[f"{d}x{m}x{L}"] = {
                            "relative_improvement": pair["relative_improvement"],
                            "shifted_wins": pair["shifted_wins"],
                        }
            limit = np.nanmax(np.abs(grid)) if np.isfinite(grid).any() else 1.0
            im = ax.imshow(grid, cmap="RdBu_r", vmin=-limit, vmax=limit, origin="lower")
            for (i, j), v in np.ndenumerate(grid):
                if np.isfinite(v):
                    ax.text(j, i, f"{100 * v:.1f}%", ha="center", va="center", fontsize=8)
            ax.set_xticks(range(len(config.grid_m)), config.grid_m)
            ax.set_yticks(range(len(config.grid_d)), config.grid_d)
            ax.set_xlabel("MLP width m")
            ax.set_ylabel("residual width d")
            ax.set_title(f"L = {L}")
            fig.colorbar(im, ax=ax, label="relative improvement")
        fig.suptitle("Fig. 12: (L_unshifted - L_shifted) / L_unshifted (red: shifting helps)")
        ctx.save_figure(fig, "fig12_size_grid")
        summary["grid"] = heat
        cells = list(heat.values())
        summary["mean_relative_improvement"] = ts.finite_mean(
            [c["relative_improvement"] for c in cells])

        optimal: dict[str, Any] = {}
        done = [r for r in results if r["unit"].get("part") == "optimal" and r["data"].get("shifts")]
        fig, axes = plt.subplots(1, max(1, len(done)), figsize=(4 * max(1, len(done)), 3.4),
                                 squeeze=False, layout="constrained")
        for ax, r in zip(axes[0], done):
            size = r["unit"]["size"]
            _, best = ts.optimal_shifts(table, f"optimal/{size}", r["data"]["shifts"])
            best = best.dropna().to_numpy(dtype=float)
            theory = r["data"]["theory_shift"]
            if best.size:
                optimal[size] = {
                    "theory_shift": theory,
                    "median_optimal_shift": float(np.median(best)),
                    "mean_abs_distance_to_theory": float(np.mean(np.abs(best - theory))),
                    "iqr": float(np.subtract(*np.percentile(best, [75, 25]))),
                    "seeds": int(best.size),
                    "optimal_shifts": best.tolist(),
                }
            shifts = sorted(r["data"]["shifts"].values())
            step = np.diff(shifts).min() if len(shifts) > 1 else 0.05
            edges = np.append(np.asarray(shifts) - step / 2, shifts[-1] + step / 2)
            ax.hist(best, bins=edges, color="tab:gray")
            ax.axvline(theory, color="tab:red", ls="--", label="theory")
            ax.set_title(size.replace("x", ", ").join("()"))
            ax.set_xlabel("per-seed optimal shift")
        axes[0, 0].set_ylabel("seeds")
        axes[0, 0].legend()
        fig.suptitle("Fig. 13: empirically optimal shifts per seed")
        ctx.save_figure(fig, "fig13_optimal_shifts")
        summary["optimal_shift"] = optimal
        return summary

    def claims(self, summary: dict) -> list[Claim]:
        """Shifting helps on average across sizes; optimal shifts concentrate near theory."""
        rows = []
        mean = summary.get("mean_relative_improvement")
        grid = summary.get("grid", {})
        if mean is not None:
            helped = sum(1 for c in grid.values() if c["relative_improvement"] > 0)
            rows.append(Claim(
                "shifting lowers the final loss across (d, m, L)",
                f"mean relative improvement {100 * mean:.1f}%; better in {helped}/{len(grid)} cells",
                bool(mean > 0 and helped > len(grid) / 2),
                "000 App. C.1, Fig. 12", id=claim_id(self.name, "all", "shift-lowers-final-loss"),
                value=mean, comparison="compound", threshold=0.0,
            ))
        optimal = summary.get("optimal_shift", {})
        if len(optimal) >= 2:
            sizes = list(optimal)
            first, last = optimal[sizes[0]], optimal[sizes[-1]]
            rows.append(Claim(
                "optimal shifts concentrate near theory as the model grows",
                f"mean |b* - b_theory|: {first['mean_abs_distance_to_theory']:.3f} ({sizes[0]}) -> "
                f"{last['mean_abs_distance_to_theory']:.3f} ({sizes[-1]})",
                bool(last["mean_abs_distance_to_theory"] <= first["mean_abs_distance_to_theory"]),
                "000 App. C.2, Fig. 13",
                id=claim_id(self.name, "all", "optimal-shifts-concentrate-near-theory"),
                value=last["mean_abs_distance_to_theory"], comparison="<=",
                threshold=first["mean_abs_distance_to_theory"],
            ))
        return rows
