"""Shared machinery of the teacher-student experiments (seed 000, §2 and App. A-C).

Settings and validation here; the training (one engine call per activation) is
:mod:`actlab.experiments._ts_train` (:func:`train_students`), the figures
:mod:`actlab.experiments._ts_figures`; both are re-exported. The experiments (``teacher-student``, ``shift-sweep``, ``size-sweep``, ``ablations``) are
thin wrappers that choose conditions and turn the table into figures and summaries.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
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
from actlab.errors import ConfigError, config_check
from actlab.experiments._ts_figures import teacher_student_figures  # noqa: F401 (re-exported)
from actlab.experiments._ts_train import (  # noqa: F401 (re-exported for the experiments)
    StudentRun,
    build_models,
    targets_from_teacher,
    train_students,
)
from actlab.train.callbacks import top_curvature
from actlab.train.losses import get_loss
from actlab.train.optim import OPTIMIZERS
from actlab.train.settings import TrainSettings, settings_from

LOSSES = ("mse", "soft_ce")  # "mse" is the engine's mse_mean (F.mse_loss), soft_ce its
# soft_cross_entropy (see actlab.train.losses)
DTYPES = {"float32": torch.float32, "float64": torch.float64}
PAPER_ACTIVATIONS = ("relu", "gelu", "silu", "sigmoid")


# --------------------------------------------------------------------------- settings
@dataclass
class ModelSettings:
    """Model and training settings shared by the teacher-student experiments.

    Defaults: the medium model (20, 80, 10) with Adam 1e-3, batch 256 of fresh Gaussian
    inputs, MSE (the paper's large model (50, 200, 20) is each experiment's ``--full``).
    ``data_on_device`` draws the inputs on the unit's device (see
    :class:`~actlab.data.synthetic.GaussianStream`); ``cuda_graphs`` replays each training
    step as a CUDA graph on a GPU (``EnsembleTrainer(graphed=...)``).
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
    # Draw the training inputs with generators on the unit's device (no copy per step on a
    # GPU, but other numbers than the CPU stream): off keeps runs comparable across devices.
    data_on_device: bool = False
    # On a GPU, record each training step as a CUDA graph and replay it (same arithmetic,
    # far fewer launches; see actlab.train.graphed); false runs the eager step. No effect
    # on the CPU.
    cuda_graphs: bool = True

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
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError("optimizer", f"must be one of {', '.join(OPTIMIZERS)}, "
                              f"got {self.optimizer!r}")
        if self.dtype not in DTYPES:
            raise ConfigError("dtype", f"must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        self.train_settings()  # the engine checks the rest (lr, ...)

    def train_settings(self) -> TrainSettings:
        """The engine settings these flat fields compose (optimizer, lr, steps, ...)."""
        return settings_from(self, loss=self.loss)


def validate_activations(field_name: str, specs: Sequence[str]) -> None:
    """Every spec must build (unknown names raise ConfigError with the registry's suggestion)."""
    from actlab.activations.spec import make_activation

    if not specs:
        raise ConfigError(field_name, "needs at least one activation")
    for spec in specs:
        if ":" in spec:
            raise ConfigError(field_name, f"give plain names (the shift is added), got {spec!r}")
        config_check(field_name, make_activation, spec)


def validate_shift_offsets(offsets: Sequence[float]) -> None:
    """Shift grids are offsets around the theory shift, so 0 (the theory shift) must be one."""
    if 0.0 not in [float(o) for o in offsets]:
        raise ConfigError("shift_offsets", "must contain 0 (the theory shift itself)")


def loss_function(name: str) -> Callable[[Tensor, Tensor], Tensor]:
    """The per-member loss: ``mse`` (mean) or ``soft_ce`` against teacher probabilities."""
    return get_loss(name)


def curvature_top(loss: str, tol: float = 1e-3, max_iter: int = 40) -> Callable[..., dict]:
    """A ``curvature_fn`` for :func:`train_students`: top Gauss-Newton and Hessian eigenvalues."""
    return functools.partial(top_curvature, loss=get_loss(loss), tol=tol, max_iter=max_iter)


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
