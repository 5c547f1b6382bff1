"""Deprecated: the supervised helpers now live in the engine's modules; import from there.

:mod:`actlab.train.supervised` (train, evaluate, statistics), :mod:`actlab.train.settings`
(``TrainSettings``), :mod:`actlab.train.optim` (``make_optimizer``), :mod:`actlab.train.losses`,
:mod:`actlab.data.images` (data) and :mod:`actlab.nn.classifiers` (models).
"""

from actlab.data.images import check_data_fields, load_image_data
from actlab.nn.classifiers import MODEL_KINDS, build_classifier
from actlab.train.losses import get_loss as loss_function
from actlab.train.optim import OPTIMIZERS, make_optimizer
from actlab.train.settings import TrainSettings
from actlab.train.supervised import (
    STATUS_DIVERGED,
    STATUS_OK,
    FitOutcome,
    TrainResult,
    activation_statistics,
    evaluate,
    fit_and_measure,
    torch_threads,
    train,
)

__all__ = ["MODEL_KINDS", "OPTIMIZERS", "STATUS_DIVERGED", "STATUS_OK", "FitOutcome",
           "TrainResult", "TrainSettings", "activation_statistics", "build_classifier",
           "check_data_fields", "evaluate", "fit_and_measure", "load_image_data",
           "loss_function", "make_optimizer", "torch_threads", "train"]
