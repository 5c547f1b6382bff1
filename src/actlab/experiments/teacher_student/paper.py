"""The controlled model at the setting of "Rethinking Activation Functions" (``--paper``), and
what its students cost (``actlab plan``), for the whole teacher-student family.

:data:`CONTROLLED_MODEL` is the model and training of the paired students: the "large model"
(d, m, L) = (50, 200, 20) of App. C.2, whose 20 blocks App. C.4 gives for Fig. 2's ReLU run
(that Figs. 2-4 use it is our reading), pre-norm blocks without biases (§2.1, eq. 2; App.
C.3 adds biases and post-norm only as variants), MSE (C.3's alternative is soft-target
cross-entropy) and Adam (Table 2 measures "during Adam training"). The paper states no
learning rate, batch size or run length: those are ours. The data are the teacher's
(§2.1): nothing to download. ``teacher-student`` adds Table 1's activations and Table 2's
angle steps (:data:`TEACHER_STUDENT`); ``shift-sweep``, ``size-sweep`` and ``ablations``
build theirs on :data:`CONTROLLED_MODEL` (:data:`SHIFT_SWEEP`, :data:`SIZE_SWEEP`,
:data:`ABLATIONS`), and :func:`students` prices any of them.
"""

from __future__ import annotations

from typing import Any

from actlab.runner.cost import Workload
from actlab.runner.paper import PaperPreset, doc, ours

RETHINKING = "Rethinking Activation Functions"

CONTROLLED_MODEL = PaperPreset({
    "d": doc(RETHINKING, "App. C.2", 50, "the 'large model' (50, 200, 20)"),
    "m": doc(RETHINKING, "App. C.2", 200, "the 'large model' (50, 200, 20)"),
    "L": doc(RETHINKING, "App. C.4", 20, "'all 20 blocks for the ReLU experiment in Figure 2'"),
    "norm": doc(RETHINKING, "§2.1, eq. 2", "pre", "pre-normalized MLP blocks"),
    "bias": doc(RETHINKING, "App. C.3", False, "trainable biases are one of C.3's variants"),
    "loss": doc(RETHINKING, "App. C.3", "mse", "soft-target cross-entropy replaces "
                                               "mean-squared error only in C.3's variant"),
    "optimizer": doc(RETHINKING, "App. B.2, Table 2", "adam", "'measured during Adam training'"),
    "lr": ours(1e-3, "the paper states no learning rate; Adam's usual default"),
    "batch_size": ours(256, "the paper states no batch size"),
    "steps": ours(8000, "the paper states no run length; --full's, past the crossovers of "
                        "our runs"),
})

TEACHER_STUDENT = CONTROLLED_MODEL.extend({
    "activations": doc(RETHINKING, "Table 1", ["relu", "gelu", "silu", "sigmoid"],
                       "ReLU, GELU, Swish, Sigmoid"),
    "angle_steps": doc(RETHINKING, "App. B.2, Table 2", [1, 5, 20, 100], "k = 1, 5, 20, 100"),
})

# App. A.2 sweeps the shift "Using the same teacher-student training procedure".
SHIFT_SWEEP = CONTROLLED_MODEL.extend(notes=(
    "App. A.2 uses 'the same teacher-student training procedure': the controlled model's "
    "setting; the five activations and the shift grid of Fig. 9 are not listed (ours).",))

# App. C.3: "All three variants use ReLU, with all other settings unchanged."
ABLATIONS = CONTROLLED_MODEL.extend({
    "activation": doc(RETHINKING, "App. C.3", "relu", "'All three variants use ReLU'"),
    "variants": doc(RETHINKING, "App. C.3", ["post_norm", "bias", "soft_ce"],
                    "post-norm blocks, trainable biases, soft-target cross-entropy"),
})

# App. C.1-C.2: the (d, m, L) grid at L = 10 and 20, three sizes with 100 paired seeds.
SIZE_SWEEP = CONTROLLED_MODEL.extend({
    "activation": doc(RETHINKING, "App. C.1-C.2", "relu", "'controlled ReLU models'"),
    "grid_L": doc(RETHINKING, "App. C.1, Fig. 12", [10, 20], "'the results for L=10 and L=20'"),
    "grid_d": ours([10, 20, 50], "Fig. 12's d values are not listed; C.2's sizes' d"),
    "grid_m": ours([20, 80, 200], "Fig. 12's m values are not listed; C.2's sizes' m"),
    "sizes": doc(RETHINKING, "App. C.2", ["5x20x2", "20x80x10", "50x200x20"],
                 "small (5, 20, 2), medium (20, 80, 10), large (50, 200, 20)"),
}, seeds=doc(RETHINKING, "App. C.2", 100, "'100 paired seeds for each model'"))


def students(config: Any, students_per_seed: int, *, d: int | None = None,
             m: int | None = None, L: int | None = None, label: str = "") -> list[Workload]:
    """The workloads of one seed of a teacher-student unit: ``students_per_seed`` students
    of (``d``, ``m``, ``L``) (default the config's) trained together as one ensemble, and
    the fixed teacher's forward pass on every batch. Evaluations of the loss at the
    ``log_points`` on ``eval_size`` inputs are priced; curvature and landscapes are not."""
    from torch import empty

    from actlab.nn.residual_mlp import ResidualMLP

    d, m, L = d or config.d, m or config.m, L or config.L

    def build() -> ResidualMLP:
        return ResidualMLP(d, m, L, "relu", norm=config.norm, bias=config.bias)

    def example(n: int) -> tuple:
        return (empty(n, d),)

    student = Workload(label or f"students {d}x{m}x{L}", build, example, config.steps,
                       config.batch_size, config.optimizer, models=students_per_seed,
                       together=True, eval_samples=config.log_points * config.eval_size)
    teacher = Workload("teacher (forward)", build, example, config.steps, config.batch_size,
                       config.optimizer, together=True, trained=False,
                       eval_samples=config.steps * config.batch_size)
    return [student, teacher]
