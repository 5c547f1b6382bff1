"""Recipe: a one-block student learning a one-block teacher, with its parameters kept at
chosen steps ("Rethinking Activation Functions", App. B.1.2: the setting Props. B.1-B.2
are tested in over training).

Teacher and student are :class:`~actlab.nn.one_block.OneBlock` models ``B(φ(Ax) − b1)`` of
the same sizes, ``d_out = d_in``. The teacher uses the plain activation (as the controlled
model's teacher does, §2.1); the student uses ``student_spec`` (e.g. ``"relu:shift=theory"``).
Each seed has its own teacher and student initialisation and its own fresh standard-normal
batches (the named streams of :mod:`actlab.data.synthetic`). The student trains with the
engine (:class:`~actlab.train.ensemble.EnsembleTrainer`, all seeds as one vmapped ensemble)
on the loss of the settings; :func:`train_one_block` returns the students' ``(A, B)`` after
each step of ``at`` (0 is the initialisation) and the teachers, whose outputs are the targets.

Example::

    settings = TrainSettings(lr=1e-3, steps=200, batch_size=128, loss="half_sse",
                             dtype="float64")
    run = train_one_block(settings, d=5, m=20, activation="relu",
                          student_spec="relu:shift=theory", seeds=[0, 1], at=[0, 10, 200])
    A, B = run.parameters(-1, 0)      # seed 0's (20, 5) and (5, 20), after 200 updates
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from actlab.data.synthetic import GaussianStream, seed_generator
from actlab.nn.losses import get_loss
from actlab.nn.one_block import OneBlock
from actlab.train.callbacks import EvalLog, LossHistory
from actlab.train.ensemble import Ensemble, EnsembleTrainer
from actlab.train.optim import functional_optimizer_for
from actlab.train.settings import TrainSettings


@dataclass
class OneBlockRun:
    """What :func:`train_one_block` kept, seeds first: the logged ``steps``; per logged step
    the students' ``(A, B)`` stacked over seeds (``(S, m, d)`` and ``(S, d, m)``, on the
    unit's device); the ``teachers`` (on the same device); every update's batch loss ``(S, steps)``; which
    students diverged ``(S,)``."""

    seeds: list[int]
    steps: list[int]
    checkpoints: list[tuple[Tensor, Tensor]]
    teachers: list[OneBlock]
    train_loss: np.ndarray
    diverged: np.ndarray

    def parameters(self, step_index: int, seed_index: int) -> tuple[Tensor, Tensor]:
        """One student's ``(A, B)`` at the ``step_index``-th logged step."""
        A, B = self.checkpoints[step_index]
        return A[seed_index], B[seed_index]


def one_block_pair(
    d: int, m: int, activation: str, student_spec: str, seed: int, dtype: torch.dtype
) -> tuple[OneBlock, OneBlock]:
    """The seed's teacher (plain ``activation``) and student (``student_spec``), on the CPU."""
    teacher = OneBlock(d, m, d, activation, generator=seed_generator(seed, "teacher"))
    student = OneBlock(d, m, d, student_spec, generator=seed_generator(seed, "student"))
    return teacher.to(dtype), student.to(dtype)


def train_one_block(
    settings: TrainSettings,
    d: int,
    m: int,
    activation: str,
    student_spec: str,
    seeds: Sequence[int],
    at: Sequence[int],
    *,
    progress: Callable[..., Any] = lambda it, **_: it,
) -> OneBlockRun:
    """Train every seed's student on its teacher for ``settings.steps`` updates, all seeds as
    one vmapped ensemble; see the module docstring. ``at`` lists the steps (updates done)
    whose parameters are kept."""
    seeds, dtype = list(seeds), settings.torch_dtype
    pairs = [one_block_pair(d, m, activation, student_spec, s, dtype) for s in seeds]
    teachers = Ensemble({"teacher": [t for t, _ in pairs]})
    ens = Ensemble({"student": [s for _, s in pairs]})
    trainer = EnsembleTrainer(ens, get_loss(settings.loss), functional_optimizer_for(settings))
    stream = GaussianStream(seeds, settings.batch_size, d, dtype)

    def batch(_: int) -> tuple[Tensor, Tensor]:
        x = next(stream)  # (S, batch, d)
        with torch.no_grad():
            return x, teachers.call(x)["teacher"]

    def keep(_: Any) -> dict[str, Tensor]:
        params = ens.params["student"]
        return {
            "A": params["up.weight"].detach().clone(),
            "B": params["down.weight"].detach().clone(),
        }

    history, log = LossHistory(), EvalLog(keep, at=sorted(set(at)))
    trainer.fit(
        settings.steps,
        batch,
        [history, log],
        progress=lambda it: progress(it, desc="one-block", leave=False),
    )
    losses = np.asarray(history.values(), dtype=np.float64).reshape(-1, len(seeds)).T
    return OneBlockRun(
        seeds,
        [r["step"] for r in log.rows],
        [(r["A"], r["B"]) for r in log.rows],
        [teachers.member("teacher", i) for i in range(len(seeds))],
        losses,
        trainer.diverged[0].cpu().numpy().copy(),
    )
