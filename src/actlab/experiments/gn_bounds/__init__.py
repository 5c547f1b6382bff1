"""``gn-bounds``: the sharpness bounds of "Rethinking Activation Functions" App. B.1 followed
through training (Props. B.1-B.2, eqs. 37-38, 45-46, 49; Figs. 10-11).

Two parts, one unit each; each trains its ten seeds (as many as the paper's test of Prop.
B.2) as one vmapped ensemble:

1. *one-block* (App. B.1.2-B.1.3): a student ``B(φ(Ax) − b1)`` learns a one-block teacher of
   the same sizes (:mod:`actlab.recipes.one_block`; Adam, fresh Gaussian batches, loss
   ``½E‖f − y‖²``). The student trains with the Table 1 shift (``student="shifted"``) or
   none. At each checkpoint, with ``A`` and ``B`` held, on a fixed sample of
   ``n_curvature`` inputs: the average activation mean ``μ̄``; a sweep of ``b`` over
   ``μ̄ ± sweep_halfwidth`` (``μ̄`` itself on the grid) with ``λ_G(b)`` and eq. 37's bounds
   ``max{λ_A, λ_B(b)}`` and ``λ_A + λ_B(b)`` from dense matrices
   (:class:`~actlab.theory.curvature.OneBlockCurvature`); ``λ_G(b*)`` as the grid minimum
   refined by golden section (``b ↦ λ_G(b)`` is convex); and at ``b = μ̄`` the top
   eigenvalues of the exact Hessian and of the Gauss-Newton matrix, ``‖H − G‖₂`` and eq.
   45's ``R_b``. Every theorem is also checked at every point measured (eqs. 37, 38 with
   eq. 28's ``‖ε‖²`` for unequal neuron means, 46).
2. *joint* (App. B.1.4): a small controlled residual model (eq. 2; ``joint_blocks`` blocks
   of the same ``d`` and ``m``) trained as the teacher-student students are; at
   initialisation and after training, with its activations held, eq. 49's joint sharpness
   of all its down-projections for ``b_ℓ = 0``, the Table 1 shift, one average mean for all
   blocks and each block's own mean ``μ̄_ℓ``, against the floor ``λmax(Σ_stack)`` that no
   shift can go below.

Everything is float64. The paper states neither the one-block model's sizes nor its
training settings; ours are in the config (the controlled model's Adam 1e-3 and batch
256).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from actlab.activations.registry import theory_shift
from actlab.activations.spec_activation import make_activation
from actlab.analysis import log_steps
from actlab.data.synthetic import gaussian_inputs
from actlab.device import place
from actlab.errors import ConfigError
from actlab.experiments.gn_bounds.claims import claims as gn_bounds_claims
from actlab.experiments.gn_bounds.figures import draw_figures
from actlab.experiments.gn_bounds.summary import JOINT, ONE_BLOCK, build_summary
from actlab.recipes.one_block import train_one_block
from actlab.recipes.teacher_student import ModelSettings, build_models, train_students
from actlab.runner.experiment import (
    STATUS_DIVERGED,
    Claim,
    Experiment,
    RunContext,
    UnitContext,
    UnitResult,
    register,
)
from actlab.runner.fields import CheckedConfig, check_plain_activations, checked
from actlab.theory.curvature import (
    OneBlockCurvature,
    joint_down_projection_sharpness,
    mean_shift_gap_bound,
    minimise_convex,
    stacked_covariance,
)
from actlab.train.optim import OPTIMIZERS
from actlab.train.settings import settings_from

# Slack of the theorem checks: float64 eigen-solves are good to ~1e-13 relative.
THEOREM_RTOL = 1e-9


@dataclass
class GnBoundsConfig(CheckedConfig):
    """Model sizes, training, the curvature sample and the shift sweep."""

    activation: str = checked("relu", spec="activation")
    student: str = checked("shifted", choices=("shifted", "unshifted"))
    d: int = checked(10, ge=1)
    m: int = checked(40, ge=1)
    optimizer: str = checked("adam", choices=OPTIMIZERS)
    lr: float = checked(1e-3, gt=0)
    steps: int = checked(2000, ge=1)
    batch_size: int = checked(256, ge=1)
    log_points: int = checked(12, ge=2)
    n_curvature: int = checked(512, ge=2)
    sweep_halfwidth: float = checked(0.5, gt=0)
    sweep_points: int = checked(21, ge=3)
    refine_steps: int = checked(10, ge=0)
    joint_blocks: int = checked(4, ge=2)

    def check(self) -> None:
        """A plain activation (the shift is the experiment's) and an odd sweep (``μ̄`` on it)."""
        check_plain_activations("activation", [self.activation])
        if self.sweep_points % 2 == 0:
            raise ConfigError(
                "sweep_points", f"must be odd so that b = μ̄ is on the grid, got {self.sweep_points}"
            )
        self.train_settings()

    def train_settings(self) -> Any:
        """The engine settings of the one-block student (loss ``½E‖f − y‖²``, float64)."""
        return settings_from(self, loss="half_sse", dtype="float64")

    @property
    def train_shift(self) -> float:
        """The shift the student trains with: Table 1's for ``shifted``, else 0."""
        return theory_shift(self.activation) if self.student == "shifted" else 0.0

    @property
    def student_spec(self) -> str:
        """The student's activation spec."""
        return f"{self.activation}:shift=theory" if self.student == "shifted" else self.activation


def checkpoint_steps(config: GnBoundsConfig) -> list[int]:
    """Logged steps: 0, a geometric and a linear series, and update 100 (Fig. 11's mark)."""
    return log_steps(config.steps, config.log_points, also=[100])


def _tol(*values: float) -> float:
    return THEOREM_RTOL * max(1.0, *(abs(v) for v in values))


def measure_checkpoint(
    curv: OneBlockCurvature, y: torch.Tensor, config: GnBoundsConfig, train_shift: float
) -> tuple[dict[str, float], dict[str, Any]]:
    """Every number of one checkpoint: ``(metrics, sweep)`` (see the module docstring)."""
    mu = curv.mean_activation
    k = config.sweep_points
    half = config.sweep_halfwidth
    grid = [mu + half * (2 * i - (k - 1)) / (k - 1) for i in range(k)]
    grid[k // 2] = mu
    b_star, lam_star, lam_grid = minimise_convex(curv.lambda_g, grid, config.refine_steps)
    lam_mu = lam_grid[k // 2]
    lam_a = curv.lambda_a
    lam_b = [curv.lambda_b(b) for b in grid]
    lower = [max(lam_a, v) for v in lam_b]
    upper = [lam_a + v for v in lam_b]
    upper_gaps = [(u - g) / g for u, g in zip(upper, lam_grid)]
    lower_gaps = [(g - lo) / g for lo, g in zip(lower, lam_grid)]
    eps_sq = mean_shift_gap_bound(curv.acts)
    eq37 = sum(g < lo - _tol(lo) or g > u + _tol(u) for lo, u, g in zip(lower, upper, lam_grid))
    # Eq. 38 is for a common neuron mean; with E[a] = μ̄1 + ε the same chain through eq. 28
    # gives λ_G(b*) <= λ_G(μ̄) <= 2 λ_G(b*) + ‖ε‖².
    eq38 = int(lam_mu < lam_star - _tol(lam_star) or lam_mu > 2 * lam_star + eps_sq + _tol(lam_mu))
    gn = curv.gauss_newton(mu)
    rest = curv.residual_term(mu, y)
    lam_h = float(torch.linalg.eigvalsh(gn + rest)[-1])
    lam_g = float(torch.linalg.eigvalsh(gn)[-1])
    hg_norm = float(torch.linalg.eigvalsh(rest).abs().max())
    r_b = curv.residual_bound(mu, y)
    # Eq. 46 needs fixed gates (φ'' = 0) and |φ'| <= 1, as for ReLU; Weyl's part always holds.
    gates = bool((curv.d2 == 0).all()) and bool((curv.d1.abs() <= 1).all())
    eq46 = int(abs(lam_h - lam_g) > hg_norm + _tol(lam_h, lam_g))
    eq46 += int(gates and hg_norm > r_b + _tol(r_b))
    metrics = {
        "mu_bar": mu,
        "lambda_a": lam_a,
        "lambda_b_mu": lam_b[k // 2],
        "lambda_g_mu": lam_mu,
        "lambda_g_star": lam_star,
        "b_star": b_star,
        "ratio_mu_star": lam_mu / lam_star,
        "b_star_at_edge": float(b_star in (grid[0], grid[-1])),
        "upper_gap_max": max(upper_gaps),
        "lower_gap_max": max(lower_gaps),
        "upper_gap_median": sorted(upper_gaps)[k // 2],
        "lower_gap_median": sorted(lower_gaps)[k // 2],
        "eps_sq": eps_sq,
        "lambda_h_mu": lam_h,
        "lambda_gn_mu": lam_g,
        "h_minus_g_norm": hg_norm,
        "residual_bound": r_b,
        "hg_rel_diff": abs(lam_h - lam_g) / lam_g,
        "loss_train_shift": curv.loss(train_shift, y),
        "loss_mu": curv.loss(mu, y),
        "violations_eq37": float(eq37),
        "violations_eq38": float(eq38),
        "violations_eq46": float(eq46),
        "fixed_gates": float(gates),
    }
    sweep = {
        "b": grid,
        "lambda_g": lam_grid,
        "lambda_b": lam_b,
        "lambda_a": lam_a,
        "mu_bar": mu,
        "b_star": b_star,
        "lambda_g_star": lam_star,
    }
    return metrics, sweep


def block_activations(
    model: torch.nn.Module, x: torch.Tensor, phi: torch.nn.Module
) -> list[torch.Tensor]:
    """Each block's unshifted activation ``φ(W1 LN(h))`` of a pre-norm
    :class:`~actlab.nn.residual_mlp.ResidualMLP` on inputs ``x`` (``φ(W1 h)`` post-norm)."""
    acts, h = [], x
    with torch.no_grad():
        for block in model.blocks:
            u = block.norm(h) if block.norm_position == "pre" else h
            acts.append(phi(block.up(u)))
            h, _ = block(h)
    return acts


def joint_metrics(acts: list[torch.Tensor], shift: float) -> dict[str, float]:
    """Eq. 49's joint sharpness of the blocks' down-projections at several shifts."""
    layers = len(acts)
    means = [float(a.mean()) for a in acts]
    overall = sum(means) / layers
    floor = float(torch.linalg.eigvalsh(stacked_covariance(acts))[-1])
    eps_sq = sum(mean_shift_gap_bound(a) for a in acts)
    at_means = joint_down_projection_sharpness(acts, means)
    # Σ_stack ≼ M_b for every b, and M at the layer means is Σ_stack + εεᵀ (eq. 28 stacked).
    violations = int(at_means < floor - _tol(floor)) + int(at_means > floor + eps_sq + _tol(floor))
    return {
        "lambda_unshifted": joint_down_projection_sharpness(acts, [0.0] * layers),
        "lambda_theory_shift": joint_down_projection_sharpness(acts, [shift] * layers),
        "lambda_global_mean": joint_down_projection_sharpness(acts, [overall] * layers),
        "lambda_layer_means": at_means,
        "lambda_floor": floor,
        "eps_sq": eps_sq,
        "layer_means_over_floor": at_means / floor,
        "mean_activation": overall,
        "violations_eq49": float(violations),
    }


@register
class GnBounds(Experiment):
    """Gauss-Newton and Hessian sharpness against the shift, with App. B.1's bounds, over training."""

    name: ClassVar[str] = "gn-bounds"
    headline_figure: ClassVar[str | None] = "fig10_bounds_sweep"
    description: ClassVar[str] = (
        "One-block model over training: λ_G(b) against eq. 37's "
        "bounds, λ_G(μ̄) vs the sweep minimum, exact Hessian vs "
        "Gauss-Newton with R_b; eq. 49's joint sharpness "
        '("Rethinking Activation Functions" App. B.1, Figs. 10-11).'
    )
    Config: ClassVar[type] = GnBoundsConfig
    quick: ClassVar[dict[str, Any]] = {
        "d": 5,
        "m": 20,
        "steps": 400,
        "batch_size": 128,
        "log_points": 8,
        "n_curvature": 256,
        "sweep_points": 15,
        "refine_steps": 8,
        "joint_blocks": 3,
    }
    # The paper gives no sizes for the one-block model: --full takes the controlled medium
    # model's width and MLP width (20, 80) (App. C.2) and trains longer.
    full: ClassVar[dict[str, Any]] = {"d": 20, "m": 80, "steps": 4000, "n_curvature": 1024}
    default_seeds: ClassVar[int] = 10
    seeds_per_unit: ClassVar[int | None] = None  # all seeds of a part train as one ensemble

    def units(self, config: GnBoundsConfig) -> list[dict[str, Any]]:
        """One unit per part (each seed its own unit)."""
        return [{"part": ONE_BLOCK}, {"part": JOINT}]

    def run_unit(
        self, config: GnBoundsConfig, unit: dict[str, Any], seeds: list[int], ctx: UnitContext
    ) -> UnitResult:
        """Train one part's models for all seeds together, then measure each seed."""
        result = UnitResult()
        phi = place(make_activation(config.activation))
        inputs = gaussian_inputs(seeds, config.n_curvature, config.d, "eval", torch.float64)
        part = self._one_block if unit["part"] == ONE_BLOCK else self._joint
        part(config, seeds, inputs, phi, result, ctx)
        return result

    def _one_block(
        self,
        config: GnBoundsConfig,
        seeds: list[int],
        inputs: torch.Tensor,
        phi: torch.nn.Module,
        result: UnitResult,
        ctx: UnitContext,
    ) -> None:
        run = train_one_block(
            config.train_settings(),
            config.d,
            config.m,
            config.activation,
            config.student_spec,
            seeds,
            checkpoint_steps(config),
            progress=ctx.progress,
        )
        sweeps = result.data.setdefault("sweeps", {})
        points = [(si, ti) for si in range(len(seeds)) for ti in range(len(run.steps))]
        for si, ti in ctx.progress(points, desc="curvature", leave=False):
            seed, step, x = seeds[si], run.steps[ti], inputs[si]
            with torch.no_grad():
                y = run.teachers[si](x)
            A, B = run.parameters(ti, si)
            metrics, sweep = measure_checkpoint(
                OneBlockCurvature(x, A, B, phi), y, config, config.train_shift
            )
            for name, value in metrics.items():
                result.add(ONE_BLOCK, seed, step, "", name, value)
            sweeps[f"{seed}/{step}"] = sweep
        for si, seed in enumerate(seeds):
            for step in run.steps[1:]:
                result.add(ONE_BLOCK, seed, step, "", "train_loss", run.train_loss[si, step - 1])
        if run.diverged.any() or not np.isfinite(run.train_loss).all():
            result.status = STATUS_DIVERGED

    def _joint(
        self,
        config: GnBoundsConfig,
        seeds: list[int],
        inputs: torch.Tensor,
        phi: torch.nn.Module,
        result: UnitResult,
        ctx: UnitContext,
    ) -> None:
        settings = ModelSettings(
            d=config.d,
            m=config.m,
            L=config.joint_blocks,
            optimizer=config.optimizer,
            lr=config.lr,
            steps=config.steps,
            batch_size=config.batch_size,
            eval_size=config.n_curvature,
            log_points=2,
            dtype="float64",
        )
        conditions = {"student": config.student_spec}
        _, students = build_models(settings, config.activation, conditions, seeds)
        run = train_students(settings, config.activation, conditions, seeds, progress=ctx.progress)
        shift = theory_shift(config.activation)
        for si, seed in enumerate(seeds):
            models = (
                (0, place(students["student"][si])),
                (config.steps, run.members.member("student", si)),
            )
            for step, model in models:
                acts = block_activations(model, inputs[si], phi)
                for name, value in joint_metrics(acts, shift).items():
                    result.add(JOINT, seed, step, "", name, value)
        if run.any_diverged:
            result.status = STATUS_DIVERGED

    def summarize(
        self, config: GnBoundsConfig, table: Any, results: list[dict[str, Any]], ctx: RunContext
    ) -> dict:
        """Per checkpoint the seed means; the claims' numbers; the figures."""
        summary = build_summary(config, table)
        if ctx.draw:  # the run's figures; not redrawn for each seed alone
            draw_figures(summary, results, ctx)
        return summary

    def claims(self, summary: dict) -> list[Claim]:
        """See ``claims.py``."""
        return gn_bounds_claims(summary)
