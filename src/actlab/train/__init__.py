"""The training engine: one single-model :class:`Trainer`, one vmapped :class:`EnsembleTrainer`,
their shared :class:`TrainSettings`, callbacks, optimizers, checkpoints and step timing.

Names are imported on first use (``from actlab.train import Trainer``); the unit's device and
precision are :mod:`actlab.device`, the losses by name :mod:`actlab.nn.losses`.
"""

from __future__ import annotations

from actlab._lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "STATUS_DIVERGED": ".loop",
    "STATUS_OK": ".loop",
    "TrainConfig": ".loop",
    "TrainResult": ".loop",
    "Trainer": ".loop",
    "TrainSettings": ".settings",
    "settings_from": ".settings",
    "Ensemble": ".ensemble",
    "EnsembleTrainer": ".ensemble",
    "Callback": ".callbacks",
    "Checkpoint": ".callbacks",
    "CurvatureSchedule": ".callbacks",
    "DivergenceStop": ".callbacks",
    "EvalLog": ".callbacks",
    "GradientAngle": ".callbacks",
    "LossHistory": ".callbacks",
    "LossLog": ".callbacks",
    "ProbeStep": ".callbacks",
    "LossSpikeCallback": ".loss_spike",
    "SpikeGuard": ".loss_spike",
    "make_optimizer": ".optim",
    "Muon": ".muon",
    "EMA": ".ema",
    "train": ".supervised",
    "evaluate": ".supervised",
    "save_checkpoint": ".checkpoint",
    "load_checkpoint": ".checkpoint",
    "StepClock": ".timing",
    "measure_step": ".timing",
    "init_distributed": ".distributed",
})
