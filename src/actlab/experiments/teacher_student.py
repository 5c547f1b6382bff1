"""``teacher-student``: unshifted vs shifted students of a fixed teacher (seed 000, §2).

Per activation, each seed has a teacher with the unshifted activation and two students
with identical initial parameters and batches, one with ``shift=theory`` (Table 1). We log
loss curves (Fig. 2 top), the hidden-state mean of every block (Figs. 2 bottom, 15), the
post-activation means (Fig. 8), the top Gauss-Newton and Hessian eigenvalues over training
(Fig. 4), the initial-gradient-plane landscapes with both trajectories and the shifted
student's off-plane plane (Fig. 3), and the gradient angle between the students at
k = 1, 5, 20, 100 against the one-layer theory (Table 2).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from actlab.errors import ConfigError
from actlab.experiments import _ts_common as ts
from actlab.experiments._teacher_student_claims import teacher_student_claims
from actlab.runner.experiment import (
    STATUS_DIVERGED,
    Claim,
    Experiment,
    RunContext,
    UnitContext,
    UnitResult,
    register,
)

# Table 2 of the seed: (k, theory angle, full-model angle) for ReLU, m = 200.
PAPER_TABLE2 = {1: (77.45, 76.25), 5: (77.44, 75.01), 20: (77.40, 69.22), 100: (77.22, 46.58)}


@dataclass
class Config(ts.ModelSettings):
    """Teacher-student settings (model/training fields from :class:`ModelSettings`).

    ``angle_steps``: updates at which the students' gradient angle is measured (Table 2).
    ``curvature_seeds``/``curvature_points``: seeds and logged steps with top eigenvalues.
    ``landscape_points``: grid size per axis of the Fig. 3 planes (0 disables them).
    ``angle_theory_eta``: learning rate in the one-layer angle theory (default: ``lr``).
    """

    activations: list[str] = field(default_factory=lambda: list(ts.PAPER_ACTIVATIONS))
    angle_steps: list[int] = field(default_factory=lambda: [1, 5, 20, 100])
    curvature_seeds: int = 2
    curvature_points: int = 8
    landscape_points: int = 21
    angle_theory_eta: float | None = None

    def __post_init__(self) -> None:
        self.validate()
        ts.validate_activations("activations", self.activations)
        if any(k < 1 for k in self.angle_steps):
            raise ConfigError("angle_steps", f"must be >= 1, got {self.angle_steps}")
        if self.curvature_seeds < 0 or self.curvature_points < 0:
            raise ConfigError("curvature_seeds", "curvature_seeds and _points must be >= 0")
        if self.landscape_points not in (0,) and self.landscape_points < 3:
            raise ConfigError("landscape_points", f"must be 0 or >= 3, got {self.landscape_points}")


def _landscape(ens, batch, run: ts.StudentRun, settings: Config, theta0, grads) -> dict[str, Any]:
    """Fig. 3: both students on the initial-gradient plane, the shifted one off it."""
    from actlab.curvature import (
        initial_gradient_plane,
        loss_plane,
        offplane_plane,
        project_trajectory,
    )

    loss = "mse" if settings.loss == "mse" else ts.loss_function(settings.loss)
    e1, e2 = initial_gradient_plane(grads["unshifted"], grads["shifted"])
    n = settings.landscape_points
    planes: dict[str, Any] = {"cos_initial_gradients": float(
        torch.dot(grads["unshifted"], grads["shifted"])
        / (grads["unshifted"].norm() * grads["shifted"].norm())
    )}
    trajectories = {c: project_trajectory(run.checkpoints[c], theta0, e1, e2)
                    for c in ("unshifted", "shifted")}
    both = torch.cat(list(trajectories.values()))
    views = [("unshifted", e1, e2, trajectories), ("shifted", e1, e2, trajectories)]
    try:
        n1, n2 = offplane_plane(run.checkpoints["shifted"], theta0, e1, e2)
        off = {"shifted": project_trajectory(run.checkpoints["shifted"], theta0, n1, n2)}
        views.append(("shifted_offplane", n1, n2, off))
    except ValueError as exc:  # the trajectory never left the plane: nothing to draw
        planes["offplane_error"] = str(exc)
    for name, d1, d2, trajs in views:
        condition = "unshifted" if name == "unshifted" else "shifted"
        coords = both if name != "shifted_offplane" else trajs["shifted"]
        span = coords.abs().amax(dim=0).clamp_min(1e-3) * 1.25
        alphas = torch.linspace(-span[0].item(), span[0].item(), n)
        betas = torch.linspace(-span[1].item(), span[1].item(), n)
        model = ens.member(condition, 0)
        grid = loss_plane(model, loss, batch, d1, d2, alphas, betas, theta0=theta0)
        planes[name] = {
            "alphas": grid.alphas.tolist(),
            "betas": grid.betas.tolist(),
            "loss": grid.loss.tolist(),
            "trajectories": {c: t.tolist() for c, t in trajs.items()},
        }
    return planes


def _theory_angles(activation: str, settings: Config) -> dict[int, float]:
    """Eq. 61 with (mu, q) of the activation at pre-activation variance 1/3, width m."""
    from actlab.theory import moments
    from actlab.theory.angle import gradient_angle

    mom = moments(activation, q=1 / 3)
    mu = mom.mean
    q = mom.second_moment - mu * mu
    eta = settings.angle_theory_eta if settings.angle_theory_eta is not None else settings.lr
    return {k: gradient_angle(k, settings.m, eta, q, mu) for k in settings.angle_steps}


@register
class TeacherStudent(Experiment):
    """Unshifted vs ``shift=theory`` students of an unshifted teacher, per activation."""

    name: ClassVar[str] = "teacher-student"
    headline_figure: ClassVar[str | None] = "fig2_loss_and_hidden_mean"
    description: ClassVar[str] = (
        "Shifted vs unshifted students: loss reversal, overshoot, sharpness, landscapes, angles"
    )
    Config: ClassVar[type] = Config
    quick: ClassVar[dict[str, Any]] = {
        "d": 10, "m": 40, "L": 4, "steps": 1500, "batch_size": 128, "eval_size": 256,
        "log_points": 40, "curvature_seeds": 1, "curvature_points": 4, "landscape_points": 11,
    }
    full: ClassVar[dict[str, Any]] = {"d": 50, "m": 200, "L": 20, "steps": 8000}
    default_seeds: ClassVar[int] = 8
    seeds_per_unit: ClassVar[int | None] = None

    def units(self, config: Config) -> list[dict[str, Any]]:
        """One unit per activation (all seeds and both students in one ensemble)."""
        return [{"activation": a} for a in config.activations]

    def run_unit(
        self, config: Config, unit: dict[str, Any], seeds: list[int], ctx: UnitContext
    ) -> UnitResult:
        """Train the pair for every seed; record curves, angles, curvature and landscapes."""
        from actlab.curvature import flat_gradient

        activation = unit["activation"]
        conditions = {"unshifted": f"{activation}:shift=0", "shifted": f"{activation}:shift=theory"}
        start: dict[str, Any] = {}

        def on_start(teacher, ens, x_eval, y_eval):
            if not config.landscape_points:
                return
            loss = "mse" if config.loss == "mse" else ts.loss_function(config.loss)
            batch = (x_eval[0, :512].clone(), y_eval[0, :512].clone())
            start["batch"] = batch
            start["theta0"] = ens.flat_params("unshifted")[0].clone()
            start["grads"] = {c: flat_gradient(ens.member(c, 0), loss, batch)
                              for c in ("unshifted", "shifted")}

        run = ts.train_students(
            config, activation, conditions, seeds,
            progress=ctx.progress,
            angle_steps=config.angle_steps,
            checkpoint_seed_index=0 if config.landscape_points else None,
            curvature_seeds=config.curvature_seeds,
            curvature_points=config.curvature_points,
            curvature_fn=ts.curvature_top(config.loss) if config.curvature_seeds else None,
            on_start=on_start,
        )
        result = UnitResult()
        run.add_rows(result, activation)
        result.data["theory_shift"] = ts.theory_shift(activation)
        result.data["theory_angles"] = {str(k): v for k, v in _theory_angles(activation, config).items()}
        if config.landscape_points:
            try:
                result.data["landscape"] = _landscape(
                    run.extras["members"], start["batch"], run, config,
                    start["theta0"], start["grads"],
                )
            except ValueError as exc:  # degenerate plane: record, don't fail the unit
                result.data["landscape_error"] = str(exc)
        if any(d.any() for d in run.diverged.values()):
            result.status = STATUS_DIVERGED
        return result

    # ------------------------------------------------------------------ summary
    def summarize(self, config: Config, table: Any, results: list[dict[str, Any]],
                  ctx: RunContext) -> dict:
        """Per activation: final/early losses, wins, crossover, overshoot, sharpness, angles."""
        summary: dict[str, Any] = {
            "scale": ts.describe_scale(config, len(results[0]["seeds"]) if results else 0),
        }
        data = {r["unit"]["activation"]: r["data"] for r in results}
        early_step = max(1, round(0.05 * config.steps))
        for activation in config.activations:
            u_run, s_run = f"{activation}/unshifted", f"{activation}/shifted"
            pair = ts.pair_summary(table, activation, early_step)
            if "status" in pair:
                summary[activation] = pair
                continue
            hu = ts.curves(table, u_run, "hidden_mean", f"block{config.L - 1}")
            hs = ts.curves(table, s_run, "hidden_mean", f"block{config.L - 1}")
            entry = {
                "theory_shift": data.get(activation, {}).get("theory_shift"),
                **pair,
                "overshoot_unshifted": ts.finite_mean(ts.overshoot(hu)),
                "overshoot_shifted": ts.finite_mean(ts.overshoot(hs)),
            }
            for kind, key in (("lambda_max_hessian", "sharpness"), ("lambda_max_gn", "sharpness_gn")):
                for cond in ("unshifted", "shifted"):
                    final = ts.final_values(table, f"{activation}/{cond}", kind)
                    entry[f"{key}_{cond}"] = ts.finite_mean(final) if len(final) else None
            theory = data.get(activation, {}).get("theory_angles", {})
            angles = table[(table.run == f"{activation}/pair") & (table.metric == "grad_angle")]
            entry["gradient_angles"] = {
                str(k): {
                    "measured": ts.finite_mean(angles[angles.step == k].value),
                    "theory": theory.get(str(k)),
                }
                for k in config.angle_steps
            }
            diverged = table[(table.metric == "diverged") & table.run.str.startswith(activation + "/")]
            entry["diverged_members"] = int(diverged.value.sum())
            summary[activation] = entry
        if activation_present := [a for a in config.activations if a in data]:
            ts.teacher_student_figures(config, table, data, activation_present, ctx)
        if config.m == 200:
            summary["paper_table2_relu_m200"] = {
                str(k): {"theory": t, "measured": m} for k, (t, m) in PAPER_TABLE2.items()
            }
        return summary

    def claims(self, summary: dict) -> list[Claim]:
        """The seed's claims per activation, with what we measured."""
        return teacher_student_claims(summary)
