"""Training side of the teacher-student experiments: one engine call per activation.

:func:`train_students` trains, for one activation, every student condition (e.g. unshifted
and ``shift=theory``; or a grid of shifts) for all seeds as one vmapped ensemble
(:meth:`~actlab.train.ensemble.EnsembleTrainer.fit`) against a per-seed fixed teacher with
the unshifted activation. Within a seed every condition starts from the same parameters
(the shifted student is the unshifted one with only its activation swapped) and sees the
same fresh Gaussian batches. The engine's callbacks log, on a fixed per-seed evaluation
set, the loss and the per-block means of the residual stream and of the activation output,
and optionally the gradient angle between two conditions, parameter checkpoints of one
seed and the curvature of a few seeds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from actlab.analysis import log_steps
from actlab.data.synthetic import GaussianStream, gaussian_inputs, seed_generator, soft_targets
from actlab.nn.residual_mlp import ResidualMLP
from actlab.train.callbacks import (
    CurvatureSchedule,
    EvalLog,
    GradientAngle,
    LossHistory,
)
from actlab.train.ensemble import Ensemble, EnsembleTrainer
from actlab.train.losses import get_loss
from actlab.train.optim import functional_optimizer_for


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
    settings: Any, activation: str, conditions: dict[str, str], seeds: Sequence[int]
) -> tuple[list[ResidualMLP], dict[str, list[ResidualMLP]]]:
    """Per seed a teacher (unshifted ``activation``) and one student per condition.

    The students of a seed are copies of one initialisation with only the activation
    changed (``conditions`` maps a name to an activation spec).
    """
    dtype = settings.train_settings().torch_dtype
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


def train_students(
    settings: Any,
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
    seeds, names = list(seeds), list(conditions)
    n, C = len(seeds), len(names)
    engine = settings.train_settings()
    teachers, students = build_models(settings, activation, conditions, seeds)
    teacher = Ensemble({"teacher": teachers})
    # All conditions x seeds in one vmapped group (condition-major): the conditions differ
    # only in buffers (the shift), so one batched forward serves them all.
    ens = Ensemble({"all": [m for c in names for m in students[c]]})
    loss_fn = get_loss(engine.loss)
    trainer = EnsembleTrainer(ens, loss_fn, functional_optimizer_for(engine),
                              graphed=None if settings.cuda_graphs else False)
    members = _MemberView(ens, names, n)

    def per_member(t: Tensor) -> Tensor:  # (S, ...) -> (C*S, ...): paired batches
        return t.repeat(C, *([1] * (t.dim() - 1)))

    x_eval = gaussian_inputs(seeds, settings.eval_size, settings.d, "eval", engine.torch_dtype)
    y_eval = targets_from_teacher(teacher, x_eval, settings.loss)
    x_eval_m, y_eval_m = per_member(x_eval), per_member(y_eval)
    # Soft-target CE never reaches zero: log KL = CE - H(teacher) so curves are comparable.
    floor = torch.zeros(C * n, dtype=engine.torch_dtype, device=x_eval.device)
    if settings.loss == "soft_ce":
        floor = -(y_eval_m * torch.log(y_eval_m.clamp_min(1e-30))).sum(-1).mean(-1)
    if on_start is not None:
        on_start(teacher, members, x_eval, y_eval)

    steps = log_steps(settings.steps, settings.log_points,
                      also=[max(1, round(0.05 * settings.steps))])
    curv_steps: set[int] = set()
    if curvature_seeds and curvature_points:
        idx = np.unique(np.round(np.geomspace(1, len(steps), curvature_points)).astype(int) - 1)
        curv_steps = {steps[i] for i in idx} | {steps[-1]}

    def measure(_: Any) -> dict[str, Any]:
        with torch.no_grad():
            out, stats = ens.call(x_eval_m, return_stats=True)["all"]
            row = {"eval_loss": torch.vmap(loss_fn)(out, y_eval_m) - floor,
                   "hidden_mean": stats["hidden_mean"], "post_act_mean": stats["post_act_mean"]}
            if checkpoint_seed_index is not None:
                flat = ens.flat_params("all")
                row["checkpoints"] = [flat[i * n + checkpoint_seed_index].clone() for i in range(C)]
        return row

    def curvature_targets(_: Any) -> dict[Any, Any]:
        return {(c, si): (members.member(c, si), (x_eval[si], y_eval[si]))
                for c in names for si in range(min(curvature_seeds, n))}

    history, log = LossHistory(), EvalLog(measure, at=steps)
    angles = GradientAngle(angle_steps if C >= 2 else (), range(n), range(n, 2 * n))
    callbacks: list[Any] = [history, angles, log]
    if curv_steps and curvature_fn is not None:
        callbacks.append(curv := CurvatureSchedule(curvature_targets, measure=curvature_fn,
                                                   at=curv_steps))
    stream = GaussianStream(seeds, settings.batch_size, settings.d, engine.torch_dtype,
                            generate_on_device=settings.data_on_device)

    def batch(_: int) -> tuple[Tensor, Tensor]:
        x = next(stream)
        return per_member(x), per_member(targets_from_teacher(teacher, x, settings.loss))

    trainer.fit(settings.steps, batch, callbacks,
                progress=lambda it: progress(it, desc=activation, leave=False))
    run = _collect(names, seeds, steps, log.rows, history.values(), trainer, members)
    run.grad_angles = {k: np.asarray(v) for k, v in angles.angles.items()}
    if curv_steps and curvature_fn is not None:
        run.curvature = [(r["key"][0], seeds[r["key"][1]], r["step"], kind, value)
                         for r in curv.rows for kind, value in r.items()
                         if kind not in ("step", "key")]
    return run


def _collect(names: list[str], seeds: list[int], steps: list[int], rows: list[dict[str, Any]],
             losses: list[Any], trainer: EnsembleTrainer, members: _MemberView) -> StudentRun:
    """The logged rows as per-condition arrays; a diverged member's curves end where its
    training loss stopped being finite."""
    n, C = len(seeds), len(names)

    def split(key: str) -> dict[str, np.ndarray]:
        arr = np.stack([r[key].detach().double().cpu().numpy() for r in rows], axis=1)  # (C*S, T, ...)
        return {c: arr[i * n:(i + 1) * n] for i, c in enumerate(names)}

    train = np.asarray(losses, dtype=np.float64).reshape(len(losses), C * n).T
    dead = trainer.diverged[0].reshape(C, n).cpu().numpy()
    run = StudentRun(names, seeds, steps, split("eval_loss"), split("hidden_mean"),
                     split("post_act_mean"), {c: train[i * n:(i + 1) * n] for i, c in
                                              enumerate(names)},
                     {c: dead[i].copy() for i, c in enumerate(names)})
    if rows and "checkpoints" in rows[0]:
        run.checkpoints = {c: [r["checkpoints"][i] for r in rows] for i, c in enumerate(names)}
    for c in names:
        for si in np.flatnonzero(run.diverged[c]):
            bad = np.flatnonzero(~np.isfinite(run.train_loss[c][si]))
            after = np.asarray(steps) > (bad[0] if bad.size else -1)
            for array in (run.eval_loss[c], run.hidden_mean[c], run.post_act_mean[c]):
                array[si, after] = np.nan
    run.extras["members"] = members
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
