"""Shared machinery of the teacher-student experiments (seed 000, §2 and App. A-C).

One call of :func:`train_students` trains, for one activation, every student condition
(e.g. unshifted and ``shift=theory``; or a grid of shifts) for all seeds as one vmapped
ensemble against a per-seed fixed teacher with the unshifted activation. Within a seed
every condition starts from the same parameters (the shifted student is the unshifted one
with only its activation swapped) and sees the same fresh Gaussian batches.

Along the way it logs, on a fixed per-seed evaluation set, the loss, the per-block mean of
the residual stream and of the activation output, and optionally the gradient angle
between two conditions, parameter checkpoints of one seed and curvature of a few seeds.
The experiments (``teacher-student``, ``shift-sweep``, ``size-sweep``, ``ablations``) are
thin wrappers that choose conditions and turn the table into figures and summaries.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from actlab.activations.spec import theory_shift  # noqa: F401 (E phi(Z), Z ~ N(0, 1/3))
from actlab.analysis import (  # noqa: F401 (re-exported for the experiments)
    COLORS,
    crossover_steps,
    curves,
    final_values,
    finite_mean,
    finite_median,
    log_steps,
    overshoot,
    pd_frame,
    plot_pair_curves,
    value_at,
)
from actlab.analysis import pyplot as _pyplot  # noqa: F401
from actlab.data.synthetic import GaussianStream, gaussian_inputs, seed_generator, soft_targets
from actlab.errors import ConfigError
from actlab.nn.residual_mlp import ResidualMLP
from actlab.train.ensemble import Ensemble, EnsembleTrainer
from actlab.train.functional_optim import make_optimizer

LOSSES = ("mse", "soft_ce")
DTYPES = {"float32": torch.float32, "float64": torch.float64}
PAPER_ACTIVATIONS = ("relu", "gelu", "silu", "sigmoid")


# --------------------------------------------------------------------------- settings
@dataclass
class ModelSettings:
    """Model and training settings shared by the teacher-student experiments.

    Defaults: the medium model (20, 80, 10) with Adam 1e-3, batch 256 of fresh Gaussian
    inputs, MSE (the paper's large model (50, 200, 20) is each experiment's ``--full``).
    """

    d: int = 20
    m: int = 80
    L: int = 10
    norm: str = "pre"
    bias: bool = False
    loss: str = "mse"
    optimizer: str = "adam"
    lr: float = 1e-3
    steps: int = 6000
    batch_size: int = 256
    eval_size: int = 1024
    log_points: int = 80
    dtype: str = "float32"

    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the first invalid field."""
        for name in ("d", "m", "L", "steps", "batch_size", "eval_size"):
            if getattr(self, name) < 1:
                raise ConfigError(name, f"must be >= 1, got {getattr(self, name)}")
        if self.log_points < 2:
            raise ConfigError("log_points", f"must be >= 2, got {self.log_points}")
        if self.norm not in ("pre", "post"):
            raise ConfigError("norm", f"must be 'pre' or 'post', got {self.norm!r}")
        if self.loss not in LOSSES:
            raise ConfigError("loss", f"must be one of {', '.join(LOSSES)}, got {self.loss!r}")
        if self.optimizer not in ("adam", "sgd"):
            raise ConfigError("optimizer", f"must be 'adam' or 'sgd', got {self.optimizer!r}")
        if not self.lr > 0:
            raise ConfigError("lr", f"must be > 0, got {self.lr}")
        if self.dtype not in DTYPES:
            raise ConfigError("dtype", f"must be one of {', '.join(DTYPES)}, got {self.dtype!r}")


def validate_activations(field_name: str, specs: Sequence[str]) -> None:
    """Every spec must build (unknown names raise ConfigError with the registry's suggestion)."""
    from actlab.nn.residual_mlp import make_activation

    if not specs:
        raise ConfigError(field_name, "needs at least one activation")
    for spec in specs:
        if ":" in spec:
            raise ConfigError(field_name, f"give plain names (the shift is added), got {spec!r}")
        try:
            make_activation(spec)
        except ValueError as exc:
            raise ConfigError(field_name, str(exc)) from None


def validate_shift_offsets(offsets: Sequence[float]) -> None:
    """Shift grids are offsets around the theory shift, so 0 (the theory shift) must be one."""
    if 0.0 not in [float(o) for o in offsets]:
        raise ConfigError("shift_offsets", "must contain 0 (the theory shift itself)")


def shifted_spec(activation: str, b: float | str) -> str:
    """``relu`` + 0.23 -> ``relu:shift=0.23``; ``b == 0`` gives the plain activation."""
    if isinstance(b, str):
        return f"{activation}:shift={b}"
    return activation if b == 0 else f"{activation}:shift={b!r}"


def loss_function(name: str) -> Callable[[Tensor, Tensor], Tensor]:
    """The per-member loss: MSE, or soft-target cross-entropy against teacher probabilities."""
    if name == "mse":
        return F.mse_loss
    return F.cross_entropy  # targets are probabilities (see targets_from_teacher)


# --------------------------------------------------------------------------- training
@dataclass
class StudentRun:
    """Everything one :func:`train_students` call measured (numpy arrays, seeds first).

    ``steps``: the logged steps (number of updates done). ``eval_loss[c]``: ``(S, T)``.
    ``hidden_mean[c]`` and ``post_act_mean[c]``: ``(S, T, L)``. ``train_loss[c]``: ``(S,
    steps)`` loss of each update's batch. ``grad_angles``: ``{k: (S,)}`` degrees between
    the first two conditions' gradients at update ``k``. ``curvature``: rows ``(condition,
    seed, step, kind, value)``. ``diverged[c]``: ``(S,)`` bools.
    """

    conditions: list[str]
    seeds: list[int]
    steps: list[int]
    eval_loss: dict[str, np.ndarray]
    hidden_mean: dict[str, np.ndarray]
    post_act_mean: dict[str, np.ndarray]
    train_loss: dict[str, np.ndarray]
    diverged: dict[str, np.ndarray]
    grad_angles: dict[int, np.ndarray] = field(default_factory=dict)
    curvature: list[tuple[str, int, int, str, float]] = field(default_factory=list)
    checkpoints: dict[str, list[Tensor]] = field(default_factory=dict)
    extras: dict[str, Any] = field(default_factory=dict)

    def add_rows(self, result: Any, prefix: str, blocks: bool = True) -> None:
        """Append this run's measurements to a :class:`UnitResult` as tidy rows.

        ``run`` is ``f"{prefix}/{condition}"``; ``layer`` is ``block{l}`` for per-block values
        (left out when ``blocks`` is false, for sweeps that only need losses).
        """
        for c in self.conditions:
            run = f"{prefix}/{c}"
            for si, seed in enumerate(self.seeds):
                for ti, step in enumerate(self.steps):
                    result.add(run, seed, step, "", "eval_loss", self.eval_loss[c][si, ti])
                    for layer in range(self.hidden_mean[c].shape[2] if blocks else 0):
                        name = f"block{layer}"
                        result.add(run, seed, step, name, "hidden_mean",
                                   self.hidden_mean[c][si, ti, layer])
                        result.add(run, seed, step, name, "post_act_mean",
                                   self.post_act_mean[c][si, ti, layer])
                result.add(run, seed, self.steps[-1], "", "diverged", float(self.diverged[c][si]))
        for k, angles in self.grad_angles.items():
            for si, seed in enumerate(self.seeds):
                result.add(f"{prefix}/pair", seed, k, "", "grad_angle", angles[si])
        for cond, seed, step, kind, value in self.curvature:
            result.add(f"{prefix}/{cond}", seed, step, "", kind, value)


def build_models(
    settings: ModelSettings, activation: str, conditions: dict[str, str], seeds: Sequence[int]
) -> tuple[list[ResidualMLP], dict[str, list[ResidualMLP]]]:
    """Per seed a teacher (unshifted ``activation``) and one student per condition.

    The students of a seed are copies of one initialisation with only the activation
    changed (``conditions`` maps a name to an activation spec).
    """
    dtype = DTYPES[settings.dtype]
    kwargs = dict(norm=settings.norm, bias=settings.bias)
    d, m, L = settings.d, settings.m, settings.L
    teachers = [
        ResidualMLP(d, m, L, activation, generator=seed_generator(s, "teacher"), **kwargs).to(dtype)
        for s in seeds
    ]
    bases = [
        ResidualMLP(d, m, L, activation, generator=seed_generator(s, "student"), **kwargs).to(dtype)
        for s in seeds
    ]
    students = {name: [b.with_activation(spec) for b in bases] for name, spec in conditions.items()}
    return teachers, students


def targets_from_teacher(teacher: Ensemble, x: Tensor, loss: str) -> Tensor:
    """Teacher outputs for ``(S, B, d)`` inputs: values (MSE) or class probabilities (soft CE)."""
    with torch.no_grad():
        y = teacher.call(x)[teacher.conditions[0]]
    return soft_targets(y) if loss == "soft_ce" else y


def _flat_grads(grads: dict[str, Tensor], seeds: int) -> Tensor:
    return torch.cat([g.reshape(seeds, -1) for g in grads.values()], dim=1)


def train_students(
    settings: ModelSettings,
    activation: str,
    conditions: dict[str, str],
    seeds: Sequence[int],
    *,
    progress: Callable[..., Any] = lambda it, **_: it,
    angle_steps: Sequence[int] = (),
    checkpoint_seed_index: int | None = None,
    curvature_seeds: int = 0,
    curvature_points: int = 0,
    curvature_fn: Callable[..., dict[str, float]] | None = None,
    on_start: Callable[[Ensemble, Ensemble, Tensor, Tensor], None] | None = None,
) -> StudentRun:
    """Train every condition's students for all seeds as one ensemble; see :class:`StudentRun`.

    ``angle_steps`` (1-based update indices) record the angle between the first two
    conditions' gradients. ``checkpoint_seed_index`` keeps that seed's flat parameters at
    every logged step (trajectories). ``curvature_fn(model, batch) -> {kind: value}`` runs on
    the first ``curvature_seeds`` seeds at ``curvature_points`` logged steps. ``on_start``
    sees ``(teachers, students, x_eval, y_eval)`` before the first update (landscapes).
    """
    seeds = list(seeds)
    n = len(seeds)
    names = list(conditions)
    C = len(names)
    dtype = DTYPES[settings.dtype]
    teachers, students = build_models(settings, activation, conditions, seeds)
    teacher = Ensemble({"teacher": teachers})
    # All conditions x seeds in one vmapped group (condition-major): the conditions differ
    # only in buffers (the shift), so one batched forward serves them all.
    ens = Ensemble({"all": [m for c in names for m in students[c]]})
    loss_fn = loss_function(settings.loss)
    trainer = EnsembleTrainer(ens, loss_fn, make_optimizer(settings.optimizer, lr=settings.lr))

    def member_index(condition: str, seed_index: int) -> int:
        return names.index(condition) * n + seed_index

    def per_member(t: Tensor) -> Tensor:  # (S, ...) -> (C*S, ...): paired batches
        return t.repeat(C, *([1] * (t.dim() - 1)))

    x_eval = gaussian_inputs(seeds, settings.eval_size, settings.d, "eval", dtype)
    y_eval = targets_from_teacher(teacher, x_eval, settings.loss)
    x_eval_m, y_eval_m = per_member(x_eval), per_member(y_eval)
    # Soft-target CE never reaches zero: log KL = CE - H(teacher) so curves are comparable.
    floor = torch.zeros(C * n, dtype=dtype)
    if settings.loss == "soft_ce":
        floor = -(y_eval_m * torch.log(y_eval_m.clamp_min(1e-30))).sum(-1).mean(-1)
    if on_start is not None:
        on_start(teacher, _MemberView(ens, names, n), x_eval, y_eval)

    early = max(1, round(0.05 * settings.steps))
    steps = log_steps(settings.steps, settings.log_points, also=[early])
    curv_steps: set[int] = set()
    if curvature_seeds and curvature_points:
        idx = np.unique(np.round(np.geomspace(1, len(steps), curvature_points)).astype(int) - 1)
        curv_steps = {steps[i] for i in idx} | {steps[-1]}
    T, L = len(steps), settings.L
    eval_loss = {c: np.full((n, T), np.nan) for c in names}
    hidden = {c: np.full((n, T, L), np.nan) for c in names}
    post = {c: np.full((n, T, L), np.nan) for c in names}
    train_loss = {c: np.full((n, settings.steps), np.nan) for c in names}
    run = StudentRun(names, seeds, steps, eval_loss, hidden, post, train_loss, {})
    if checkpoint_seed_index is not None:
        run.checkpoints = {c: [] for c in names}

    def split(t: Tensor) -> dict[str, np.ndarray]:
        arr = t.detach().double().reshape(C, n, *t.shape[1:]).numpy()
        return {c: arr[i] for i, c in enumerate(names)}

    def log(ti: int, step: int) -> None:
        with torch.no_grad():
            out, stats = ens.call(x_eval_m, return_stats=True)["all"]
            losses = split(torch.vmap(loss_fn)(out, y_eval_m) - floor)
            hid, pst = split(stats["hidden_mean"]), split(stats["post_act_mean"])
            flat = ens.flat_params("all") if checkpoint_seed_index is not None else None
        for c in names:
            eval_loss[c][:, ti] = losses[c]
            hidden[c][:, ti] = hid[c]
            post[c][:, ti] = pst[c]
            if flat is not None:
                run.checkpoints[c].append(flat[member_index(c, checkpoint_seed_index)].clone())
        if step in curv_steps and curvature_fn is not None:
            for c in names:
                for si in range(min(curvature_seeds, n)):
                    batch = (x_eval[si], y_eval[si])
                    model = ens.member("all", member_index(c, si))
                    for kind, value in curvature_fn(model, batch).items():
                        run.curvature.append((c, seeds[si], step, kind, value))

    angle_set = {int(k) for k in angle_steps}
    stream = GaussianStream(seeds, settings.batch_size, settings.d, dtype)
    ti = 0
    for step in progress(range(settings.steps + 1), desc=activation, leave=False):
        if ti < T and steps[ti] == step:
            log(ti, step)
            ti += 1
        if step == settings.steps:
            break
        x = next(stream)
        y = targets_from_teacher(teacher, x, settings.loss)
        want_grads = (step + 1) in angle_set and C >= 2
        out = trainer.step(per_member(x), per_member(y), return_grads=want_grads)
        for c, values in split(out.losses["all"]).items():
            train_loss[c][:, step] = values
        if want_grads:
            g = _flat_grads(out.grads["all"], C * n).double()
            g0, g1 = g[:n], g[n:2 * n]
            cos = (g0 * g1).sum(1) / (g0.norm(dim=1) * g1.norm(dim=1))
            run.grad_angles[step + 1] = torch.rad2deg(torch.arccos(cos.clamp(-1, 1))).numpy()
    dead = trainer.diverged[0].reshape(C, n).numpy()
    run.diverged = {c: dead[i].copy() for i, c in enumerate(names)}
    for c in names:  # a diverged member's curves end where its training loss stopped being finite
        for si in np.flatnonzero(run.diverged[c]):
            bad = np.flatnonzero(~np.isfinite(train_loss[c][si]))
            after = np.asarray(steps) > (bad[0] if bad.size else -1)
            for array in (eval_loss[c], hidden[c], post[c]):
                array[si, after] = np.nan
    run.extras["members"] = _MemberView(ens, names, n)
    return run


class _MemberView:
    """Condition/seed access to the condition-major single-group ensemble."""

    def __init__(self, ens: Ensemble, names: list[str], seeds: int) -> None:
        self.ens, self.names, self.seeds = ens, names, seeds

    def member(self, condition: str, seed_index: int) -> torch.nn.Module:
        """A standalone copy of one student."""
        return self.ens.member("all", self.names.index(condition) * self.seeds + seed_index)

    def flat_params(self, condition: str) -> Tensor:
        """``(seeds, P)`` parameters of one condition."""
        i = self.names.index(condition) * self.seeds
        return self.ens.flat_params("all")[i: i + self.seeds]


def curvature_top(
    loss: str, tol: float = 1e-3, max_iter: int = 40
) -> Callable[[torch.nn.Module, tuple[Tensor, Tensor]], dict[str, float]]:
    """A ``curvature_fn`` for :func:`train_students`: top Gauss-Newton and Hessian eigenvalues."""
    from actlab.curvature import GaussNewtonOperator, HessianOperator, top_eigenvalues

    loss_fn: Any = "mse" if loss == "mse" else loss_function(loss)

    def measure(model: torch.nn.Module, batch: tuple[Tensor, Tensor]) -> dict[str, float]:
        out = {}
        for kind, op_cls in (("lambda_max_gn", GaussNewtonOperator),
                             ("lambda_max_hessian", HessianOperator)):
            op = op_cls(model, loss_fn, [batch])
            values, _, _ = top_eigenvalues(
                op, k=1, method="lanczos", tol=tol, max_iter=max_iter,
                generator=torch.Generator().manual_seed(0),
            )
            out[kind] = float(values[0])
        return out

    return measure


# --------------------------------------------------------------------------- summaries


def pair_summary(table: Any, prefix: str, early_step: float) -> dict[str, Any]:
    """Final and early losses, wins and crossover of ``prefix/unshifted`` vs ``prefix/shifted``."""
    u, s = curves(table, f"{prefix}/unshifted"), curves(table, f"{prefix}/shifted")
    if u.empty or s.empty:
        return {"status": "missing"}
    final_u, final_s = u.iloc[-1], s.iloc[-1]
    paired = np.isfinite(final_u) & np.isfinite(final_s)
    mean_u, mean_s = finite_mean(final_u), finite_mean(final_s)
    crossings = crossover_steps(u, s)
    return {
        "final_loss_unshifted": mean_u,
        "final_loss_shifted": mean_s,
        "relative_improvement": None if not mean_u or mean_s is None else (mean_u - mean_s) / mean_u,
        "shifted_wins": float((final_s[paired] < final_u[paired]).mean()) if paired.any() else None,
        "early_step": int(value_at(u, early_step).name),
        "early_loss_unshifted": finite_mean(value_at(u, early_step)),
        "early_loss_shifted": finite_mean(value_at(s, early_step)),
        "crossover_step": finite_median(crossings),
        "crossover_seeds": int(np.isfinite(crossings).sum()),
    }


def optimal_shifts(table: Any, prefix: str, shifts: dict[str, float]) -> tuple[Any, Any]:
    """Final loss per seed (rows) and shift (columns), and each seed's loss-minimising shift."""
    finals = {b: final_values(table, f"{prefix}/{name}") for name, b in shifts.items()}
    frame = pd_frame(finals).sort_index(axis=1)
    best = frame.idxmin(axis=1, skipna=True)
    return frame, best


def shift_conditions(activation: str, offsets: Sequence[float], include_zero: bool) -> dict[str, float]:
    """``{condition name: b}`` for ``b = theory + offset`` (and ``b = 0`` when asked)."""
    base = theory_shift(activation)
    values = {round(base + float(o), 6) for o in offsets}
    if include_zero:
        values.add(0.0)
    return {f"b={b:+.4f}": b for b in sorted(values)}


def describe_scale(settings: ModelSettings, seeds: int, size: str | None = None) -> str:
    """One line saying what scale ran, for summaries (``size`` replaces the (d, m, L) part)."""
    size = size or f"(d, m, L) = ({settings.d}, {settings.m}, {settings.L})"
    return (
        f"{size}, {settings.norm}-norm, "
        f"{settings.optimizer} lr {settings.lr}, batch {settings.batch_size}, "
        f"{settings.steps} steps, {seeds} seeds, loss {settings.loss}"
    )


# --------------------------------------------------------------------------- figures


def teacher_student_figures(config: Any, table: Any, data: dict[str, Any],
                            activations: list[str], ctx: Any) -> None:
    """Figs. 2, 3, 4, 8, 15 of the seed from the tidy table and the units' data."""
    plt = _pyplot()
    n = len(activations)
    last = f"block{config.L - 1}"

    fig, axes = plt.subplots(2, n, figsize=(4 * n, 6.5), squeeze=False, layout="constrained")
    for j, act in enumerate(activations):
        plot_pair_curves(axes[0, j], table, act)
        axes[0, j].set_title(act)
        axes[0, j].set_ylabel("eval loss")
        plot_pair_curves(axes[1, j], table, act, "hidden_mean", last, log=False)
        axes[1, j].set_xscale("symlog", linthresh=10)
        axes[1, j].set_ylabel(f"hidden-state mean ({last})")
    axes[0, 0].legend()
    fig.suptitle("Fig. 2: loss (top) and final hidden-state mean (bottom)")
    ctx.save_figure(fig, "fig2_loss_and_hidden_mean")

    for act in activations:
        fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
        cmap = plt.get_cmap("viridis")
        for ax, cond in zip(axes, COLORS):
            for layer in range(config.L):
                curve = curves(table, f"{act}/{cond}", "hidden_mean", f"block{layer}")
                if not curve.empty:
                    ax.plot(curve.index, curve.mean(axis=1), color=cmap(layer / max(1, config.L - 1)))
            ax.set_xscale("symlog", linthresh=10)
            ax.set_title(f"{act}, {cond}")
            ax.set_xlabel("step")
        axes[0].set_ylabel("hidden-state mean (colour: block)")
        fig.suptitle("Fig. 15: hidden-state mean of every block (mean over seeds)")
        ctx.save_figure(fig, f"fig15_all_blocks_{act}")

    fig, axes = plt.subplots(1, n, figsize=(4 * n, 3.5), squeeze=False)
    for j, act in enumerate(activations):
        for cond, color in COLORS.items():
            rows = table[(table.run == f"{act}/{cond}") & (table.metric == "post_act_mean")]
            mean = rows.groupby("step").value.mean()
            axes[0, j].plot(mean.index, mean.to_numpy(), color=color, label=cond)
        axes[0, j].axhline(0, color="k", lw=0.5)
        axes[0, j].set_xscale("symlog", linthresh=10)
        axes[0, j].set_title(act)
        axes[0, j].set_xlabel("step")
    axes[0, 0].set_ylabel("post-activation mean (all blocks, seeds)")
    axes[0, 0].legend()
    fig.suptitle("Fig. 8: post-activation means over training")
    ctx.save_figure(fig, "fig8_post_activation_means")

    fig, axes = plt.subplots(1, n, figsize=(4 * n, 3.5), squeeze=False)
    for j, act in enumerate(activations):
        for cond, color in COLORS.items():
            for kind, style in (("lambda_max_hessian", "-"), ("lambda_max_gn", "--")):
                rows = table[(table.run == f"{act}/{cond}") & (table.metric == kind)]
                if rows.empty:
                    continue
                mean = rows.groupby("step").value.mean()
                label = f"{cond} {'H' if kind.endswith('hessian') else 'GN'}"
                axes[0, j].plot(np.maximum(mean.index, 1), mean.to_numpy(), style, color=color,
                                label=label)
        axes[0, j].set_xscale("log")
        axes[0, j].set_yscale("log")
        axes[0, j].set_title(act)
        axes[0, j].set_xlabel("step")
    axes[0, 0].set_ylabel("top eigenvalue")
    axes[0, 0].legend(fontsize=7)
    fig.suptitle("Fig. 4: sharpness over training (Hessian solid, Gauss-Newton dashed)")
    ctx.save_figure(fig, "fig4_sharpness")

    for act in activations:
        planes = data.get(act, {}).get("landscape")
        if not planes:
            continue
        views = [v for v in ("unshifted", "shifted", "shifted_offplane") if v in planes]
        fig, axes = plt.subplots(1, len(views), figsize=(5.5 * len(views), 4.4), squeeze=False,
                                 layout="constrained")
        for ax, view in zip(axes[0], views):
            plane = planes[view]
            z = np.log10(np.maximum(np.asarray(plane["loss"]), 1e-12))
            cs = ax.contourf(plane["alphas"], plane["betas"], z, levels=30, cmap="coolwarm")
            fig.colorbar(cs, ax=ax, label="log10 loss")
            for cond, traj in plane["trajectories"].items():
                t = np.asarray(traj)
                ax.plot(t[:, 0], t[:, 1], ".-", color=COLORS[cond], ms=2, label=cond)
            axes_names = ("n1", "n2") if view == "shifted_offplane" else ("e1", "e2")
            ax.set_xlabel(axes_names[0])
            ax.set_ylabel(axes_names[1])
            ax.set_title(f"{act}: {view.replace('_', ' ')} student loss")
            ax.legend(fontsize=7)
        fig.suptitle("Fig. 3: initial-gradient plane (left, centre) and off-plane plane (right)")
        ctx.save_figure(fig, f"fig3_landscape_{act}")
