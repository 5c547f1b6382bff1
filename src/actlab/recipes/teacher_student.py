"""Paired teacher-student students: one fixed teacher per seed, students that differ only in
their activation, trained together as one vmapped ensemble
("Rethinking Activation Functions", §2 and Apps. A-C).

For one activation, :func:`train_students` trains every student condition (e.g. unshifted
and ``shift=theory``, or a grid of shifts) for all seeds in one
:meth:`~actlab.train.ensemble.EnsembleTrainer.fit` call against a per-seed teacher with the
unshifted activation. Within a seed every condition starts from the same parameters (the
shifted student is the unshifted one with only its activation swapped,
:func:`build_models`) and sees the same fresh Gaussian batches. The engine's callbacks log,
on a fixed per-seed evaluation set, the loss and the per-block means of the residual stream
and of the activation output, and optionally the gradient angle between the first two
conditions, parameter checkpoints of one seed and the curvature of a few seeds. The
measurements come back as a :class:`StudentRun`; :meth:`StudentRun.add_rows` writes them as
tidy rows (``run = prefix/condition``). :func:`start_point` and :func:`landscape` add the
initial-gradient-plane loss landscapes of a pair (Fig. 3).

Example::

    settings = ModelSettings(d=10, m=40, L=4, steps=1500)
    conditions = {"unshifted": "relu:shift=0", "shifted": "relu:shift=theory"}
    run = train_students(settings, "relu", conditions, seeds=[0, 1], angle_steps=[1, 5])
    run.eval_loss["shifted"]          # (seeds, logged steps)
    run.grad_angles[1]                # (seeds,) degrees at the first update

The settings are :class:`ModelSettings` (any object with its fields works); ``loss="mse"``
is the engine's ``mse_mean`` (``F.mse_loss``), ``"soft_ce"`` its soft-target cross-entropy
against the teacher's softmax, logged as the KL divergence to the teacher.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from actlab.activations.registry import theory_shift
from actlab.analysis import log_steps
from actlab.config import CheckedConfig, checked
from actlab.data.synthetic import GaussianStream, gaussian_inputs, seed_generator, soft_targets
from actlab.errors import ConfigError
from actlab.nn.losses import get_loss
from actlab.nn.residual_mlp import ResidualMLP
from actlab.train.callbacks import (
    CurvatureSchedule,
    EvalLog,
    GradientAngle,
    LossHistory,
    TopCurvature,
    top_curvature,
)
from actlab.train.ensemble import Ensemble, EnsembleTrainer
from actlab.train.optim import OPTIMIZERS, functional_optimizer_for
from actlab.train.settings import TrainSettings, settings_from

LOSSES = ("mse", "soft_ce")
DTYPES = ("float32", "float64")

# "Rethinking Activation Functions" §2.2 on Fig. 2: the unshifted student's hidden state
# "overshoots around step 100, coinciding with its period of faster loss reduction". The only
# step the paper's text names for the early period, so the early comparison is made there (an
# absolute step, not a share of our run length) and every run logs it.
PAPER_EARLY_STEP = 100


# --------------------------------------------------------------------------- settings
@dataclass
class ModelSettings(CheckedConfig):
    """Model and training settings of the paired students (the base of every experiment
    config of the family).

    Defaults: the medium model (20, 80, 10) with Adam 1e-3, batch 256 of fresh Gaussian
    inputs, MSE (the paper's large model (50, 200, 20) is each experiment's ``--full``).
    ``data_on_device`` draws the inputs on the unit's device (see
    :class:`~actlab.data.synthetic.GaussianStream`); ``cuda_graphs`` replays each training
    step as a CUDA graph on a GPU (``EnsembleTrainer(graphed=...)``).
    """

    d: int = checked(20, ge=1)
    m: int = checked(80, ge=1)
    L: int = checked(10, ge=1)
    norm: str = checked("pre", choices=("pre", "post"))
    bias: bool = False
    loss: str = checked("mse", choices=LOSSES)
    optimizer: str = checked("adam", choices=OPTIMIZERS)
    lr: float = checked(1e-3, gt=0)
    steps: int = checked(6000, ge=1)
    batch_size: int = checked(256, ge=1)
    eval_size: int = checked(1024, ge=1)
    log_points: int = checked(80, ge=2)
    dtype: str = checked("float32", choices=DTYPES)
    # Draw the training inputs with generators on the unit's device (no copy per step on a
    # GPU, but other numbers than the CPU stream): off keeps runs comparable across devices.
    data_on_device: bool = False
    # On a GPU, record each training step as a CUDA graph and replay it (same arithmetic,
    # far fewer launches; see actlab.train.graphed); false runs the eager step. No effect
    # on the CPU.
    cuda_graphs: bool = True

    def check(self) -> None:
        """The engine's own checks of the settings these fields compose."""
        self.train_settings()

    def train_settings(self) -> TrainSettings:
        """The engine settings these flat fields compose (optimizer, lr, steps, ...)."""
        return settings_from(self, loss=self.loss)


def check_shift_offsets(offsets: Sequence[float]) -> None:
    """Shift grids are offsets around the theory shift, so 0 (the theory shift) must be one."""
    if 0.0 not in [float(o) for o in offsets]:
        raise ConfigError("shift_offsets", "must contain 0 (the theory shift itself)")


def shift_conditions(activation: str, offsets: Sequence[float], include_zero: bool) -> dict[str, float]:
    """``{condition name: b}`` for ``b = theory + offset`` (and ``b = 0`` when asked)."""
    base = theory_shift(activation)
    values = {round(base + float(o), 6) for o in offsets}
    if include_zero:
        values.add(0.0)
    return {f"b={b:+.4f}": b for b in sorted(values)}


def curvature_top(loss: str, tol: float = 1e-3, max_iter: int = 40, k: int = 1,
                  warm_start: bool = False) -> Callable[..., dict]:
    """A ``curvature_fn`` for :func:`train_students`: the top Gauss-Newton eigenvalue and the
    top ``k`` Hessian eigenvalues (warm-started from the same student's previous
    measurement with ``warm_start``; :class:`~actlab.train.callbacks.TopCurvature`)."""
    if k == 1 and not warm_start:
        return functools.partial(top_curvature, loss=get_loss(loss), tol=tol, max_iter=max_iter)
    return TopCurvature(get_loss(loss), k=k, tol=tol, max_iter=max_iter, warm_start=warm_start)


# --------------------------------------------------------------------------- training
@dataclass
class StudentRun:
    """Everything one :func:`train_students` call measured (numpy arrays, seeds first).

    ``steps``: the logged steps (number of updates done). ``eval_loss[c]``: ``(S, T)``.
    ``hidden_mean[c]`` and ``post_act_mean[c]``: ``(S, T, L)``. ``train_loss[c]``: ``(S,
    steps)`` loss of each update's batch. ``grad_angles``: ``{k: (S,)}`` degrees between
    the first two conditions' gradients at update ``k``. ``curvature``: rows ``(condition,
    seed, step, kind, value)``. ``plane[c]``: ``(S, T, 3)``, each student's displacement
    from the common start on its seed's initial-gradient plane (``alpha``, ``beta``) and its
    squared length (``track_plane``). ``block_update[c]``: ``(S, T, L)``, the size of each
    block's update so far, ``||theta_l(t) - theta_l(0)|| / ||theta_l(0)||`` over all of block
    ``l``'s parameters (:func:`block_update`). ``diverged[c]``: ``(S,)`` bools. ``members``:
    condition and seed access to the trained students (:class:`MemberView`).
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
    plane: dict[str, np.ndarray] = field(default_factory=dict)
    block_update: dict[str, np.ndarray] = field(default_factory=dict)
    members: MemberView | None = None

    @property
    def any_diverged(self) -> bool:
        """Whether any student of any condition diverged."""
        return any(d.any() for d in self.diverged.values())

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
                        if c in self.block_update:
                            result.add(run, seed, step, name, "block_update",
                                       self.block_update[c][si, ti, layer])
                result.add(run, seed, self.steps[-1], "", "diverged", float(self.diverged[c][si]))
        for k, angles in self.grad_angles.items():
            for si, seed in enumerate(self.seeds):
                result.add(f"{prefix}/pair", seed, k, "", "grad_angle", angles[si])
        for cond, seed, step, kind, value in self.curvature:
            result.add(f"{prefix}/{cond}", seed, step, "", kind, value)
        for c, values in self.plane.items():
            for si, seed in enumerate(self.seeds):
                for ti, step in enumerate(self.steps):
                    for j, metric in enumerate(PLANE_METRICS):
                        result.add(f"{prefix}/{c}", seed, step, "", metric, values[si, ti, j])


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
    on_start: Callable[[Ensemble, MemberView, Tensor, Tensor], None] | None = None,
    track_plane: bool = False,
) -> StudentRun:
    """Train every condition's students for all seeds as one ensemble; see :class:`StudentRun`.

    ``angle_steps`` (1-based update indices) record the angle between the first two
    conditions' gradients. ``checkpoint_seed_index`` keeps that seed's flat parameters at
    every logged step (trajectories). ``curvature_fn(model, batch) -> {kind: value}`` runs on
    the first ``curvature_seeds`` seeds at ``curvature_points`` logged steps. ``on_start``
    sees ``(teachers, students, x_eval, y_eval)`` before the first update (landscapes).
    ``track_plane`` projects every student's displacement, at every logged step, on its
    seed's initial-gradient plane of the first two conditions (eq. 4; Fig. 3 for every
    seed, without keeping checkpoints).
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
    members = MemberView(ens, names, n)

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
    plane = (seed_planes(members, x_eval, y_eval, settings.loss, names[:2])
             if track_plane and C >= 2 else None)

    steps = log_steps(settings.steps, settings.log_points,
                      also=[max(1, round(0.05 * settings.steps)), PAPER_EARLY_STEP])
    curv_steps: set[int] = set()
    if curvature_seeds and curvature_points:
        idx = np.unique(np.round(np.geomspace(1, len(steps), curvature_points)).astype(int) - 1)
        curv_steps = {steps[i] for i in idx} | {steps[-1]}

    # every member's start, for the size of each block's update (Fig. 2's "why": how far each
    # block moved, beside the hidden-state mean's drift)
    start = {name: p.detach().clone() for name, p in ens.params["all"].items()}

    def measure(_: Any) -> dict[str, Any]:
        with torch.no_grad():
            out, stats = ens.call(x_eval_m, return_stats=True)["all"]
            row = {"eval_loss": torch.vmap(loss_fn)(out, y_eval_m) - floor,
                   "hidden_mean": stats["hidden_mean"], "post_act_mean": stats["post_act_mean"],
                   "block_update": block_update(ens.params["all"], start, settings.L)}
            if plane is not None:
                row["plane"] = plane.project(ens.flat_params("all"))
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


def block_update(params: dict[str, Tensor], start: dict[str, Tensor], blocks: int) -> Tensor:
    """``(members, blocks)``: per member of a stacked ensemble, how far each block has moved
    from ``start``, ``||theta_l - theta_l(0)|| / ||theta_l(0)||`` over every parameter named
    ``blocks.<l>.*`` (weights, biases, norm gains)."""
    first = next(iter(params.values()))
    members = first.shape[0]
    moved = torch.zeros(members, blocks, dtype=torch.float64, device=first.device)
    size = torch.zeros_like(moved)
    for name, tensor in params.items():
        parts = name.split(".")
        if parts[0] != "blocks":
            continue
        block = int(parts[1])
        before = start[name].reshape(members, -1).double()
        moved[:, block] += (tensor.detach().reshape(members, -1).double() - before).pow(2).sum(1)
        size[:, block] += before.pow(2).sum(1)
    return (moved / size).sqrt()


def _collect(names: list[str], seeds: list[int], steps: list[int], rows: list[dict[str, Any]],
             losses: list[Any], trainer: EnsembleTrainer, members: MemberView) -> StudentRun:
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
                     {c: dead[i].copy() for i, c in enumerate(names)}, members=members)
    if rows and "plane" in rows[0]:
        run.plane = split("plane")
    if rows and "block_update" in rows[0]:
        run.block_update = split("block_update")
    if rows and "checkpoints" in rows[0]:
        run.checkpoints = {c: [r["checkpoints"][i] for r in rows] for i, c in enumerate(names)}
    for c in names:
        for si in np.flatnonzero(run.diverged[c]):
            bad = np.flatnonzero(~np.isfinite(run.train_loss[c][si]))
            after = np.asarray(steps) > (bad[0] if bad.size else -1)
            for array in (run.eval_loss[c], run.hidden_mean[c], run.post_act_mean[c],
                          *([run.block_update[c]] if c in run.block_update else [])):
                array[si, after] = np.nan
    return run


class MemberView:
    """Condition/seed access to the condition-major single-group ensemble of the students."""

    def __init__(self, ens: Ensemble, names: list[str], seeds: int) -> None:
        self.ens, self.names, self.seeds = ens, names, seeds

    def member(self, condition: str, seed_index: int) -> torch.nn.Module:
        """A standalone copy of one student."""
        return self.ens.member("all", self.names.index(condition) * self.seeds + seed_index)

    def flat_params(self, condition: str) -> Tensor:
        """``(seeds, P)`` parameters of one condition."""
        i = self.names.index(condition) * self.seeds
        return self.ens.flat_params("all")[i: i + self.seeds]


# --------------------------------------------------------------------------- landscapes
@dataclass
class StartPoint:
    """A pair of students before the first update: a fixed evaluation batch of seed 0, that
    seed's common initial parameters ``theta0`` and each condition's gradient there."""

    batch: tuple[Tensor, Tensor]
    theta0: Tensor
    grads: dict[str, Tensor]


def _landscape_loss(loss: str) -> Any:
    # "mse" is named so the curvature code takes its own MSE path.
    return "mse" if loss == "mse" else get_loss(loss)


def start_point(members: MemberView, x_eval: Tensor, y_eval: Tensor, loss: str,
                pair: tuple[str, str] = ("unshifted", "shifted"), size: int = 512) -> StartPoint:
    """The :class:`StartPoint` of seed 0's ``pair``; call it from ``train_students(on_start=)``."""
    from actlab.curvature import flat_gradient

    batch = (x_eval[0, :size].clone(), y_eval[0, :size].clone())
    theta0 = members.flat_params(pair[0])[0].clone()
    grads = {c: flat_gradient(members.member(c, 0), _landscape_loss(loss), batch) for c in pair}
    return StartPoint(batch, theta0, grads)


PLANE_METRICS = ("plane_alpha", "plane_beta", "displacement_sq")


@dataclass
class SeedPlanes:
    """Per seed the common start ``theta0`` ``(S, P)`` and the orthonormal basis ``e1``,
    ``e2`` ``(S, P)`` of its initial-gradient plane (eq. 4)."""

    theta0: Tensor
    e1: Tensor
    e2: Tensor

    def project(self, flat: Tensor) -> Tensor:
        """``(C*S, 3)``: each member's displacement on its seed's plane and its squared length
        (``flat``: ``(C*S, P)`` in condition-major order)."""
        reps = flat.shape[0] // self.theta0.shape[0]
        d = flat - self.theta0.repeat(reps, 1)
        return torch.stack([(d * self.e1.repeat(reps, 1)).sum(1),
                            (d * self.e2.repeat(reps, 1)).sum(1), (d * d).sum(1)], dim=1)


def seed_planes(members: MemberView, x_eval: Tensor, y_eval: Tensor, loss: str,
                pair: Sequence[str], size: int = 512) -> SeedPlanes:
    """Every seed's initial-gradient plane of ``pair`` on the first ``size`` evaluation inputs
    (for seed 0 the plane :func:`start_point` and :func:`landscape` draw)."""
    from actlab.curvature import flat_gradient, initial_gradient_plane

    theta0 = members.flat_params(pair[0]).clone()
    e1s, e2s = [], []
    for si in range(theta0.shape[0]):
        batch = (x_eval[si, :size], y_eval[si, :size])
        g1, g2 = (flat_gradient(members.member(c, si), _landscape_loss(loss), batch)
                  for c in pair)
        try:
            e1, e2 = initial_gradient_plane(g1, g2)
        except ValueError:  # parallel initial gradients: no plane for this seed
            e1 = e2 = torch.full_like(g1, math.nan)
        e1s.append(e1)
        e2s.append(e2)
    return SeedPlanes(theta0, torch.stack(e1s), torch.stack(e2s))


def landscape(run: StudentRun, start: StartPoint, loss: str, points: int,
              pair: tuple[str, str] = ("unshifted", "shifted")) -> dict[str, Any]:
    """Fig. 3: both students' trajectories on the initial-gradient plane, with the loss of
    each on a ``points x points`` grid, and the second student on its own off-plane plane.

    Needs ``run`` trained with ``checkpoint_seed_index=0``. Keys: ``cos_initial_gradients``,
    then per view (``pair[0]``, ``pair[1]``, ``f"{pair[1]}_offplane"``) the grid
    ``alphas``, ``betas``, ``loss`` and the projected ``trajectories``; ``offplane_error``
    when the second trajectory never left the plane. Raises ``ValueError`` for a degenerate
    plane (parallel initial gradients).
    """
    from actlab.curvature import (
        initial_gradient_plane,
        loss_plane,
        offplane_plane,
        project_trajectory,
    )

    first, second = pair
    g1, g2 = start.grads[first], start.grads[second]
    e1, e2 = initial_gradient_plane(g1, g2)
    planes: dict[str, Any] = {"cos_initial_gradients": float(
        torch.dot(g1, g2) / (g1.norm() * g2.norm()))}
    trajectories = {c: project_trajectory(run.checkpoints[c], start.theta0, e1, e2) for c in pair}
    both = torch.cat(list(trajectories.values()))
    views = [(first, first, e1, e2, trajectories, both),
             (second, second, e1, e2, trajectories, both)]
    try:
        n1, n2 = offplane_plane(run.checkpoints[second], start.theta0, e1, e2)
        off = {second: project_trajectory(run.checkpoints[second], start.theta0, n1, n2)}
        views.append((f"{second}_offplane", second, n1, n2, off, off[second]))
    except ValueError as exc:  # the trajectory never left the plane: nothing to draw
        planes["offplane_error"] = str(exc)
    for name, condition, d1, d2, trajs, coords in views:
        span = coords.abs().amax(dim=0).clamp_min(1e-3) * 1.25
        alphas = torch.linspace(-span[0].item(), span[0].item(), points)
        betas = torch.linspace(-span[1].item(), span[1].item(), points)
        model = run.members.member(condition, 0)
        grid = loss_plane(model, _landscape_loss(loss), start.batch, d1, d2, alphas, betas,
                          theta0=start.theta0)
        planes[name] = {
            "alphas": grid.alphas.tolist(),
            "betas": grid.betas.tolist(),
            "loss": grid.loss.tolist(),
            "trajectories": {c: t.tolist() for c, t in trajs.items()},
        }
    return planes
