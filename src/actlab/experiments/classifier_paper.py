"""The CIFAR-10 classifiers of "Bug or Feature²" at the paper's setting (``--paper``) and what
they cost (``actlab plan``), for ``drift``, ``sparsity``, ``sparse-activations`` and
``relufication``.

App. D.1: CIFAR-10 normalised per channel, training batches of 128, evaluation on the
unaugmented test set, bias-free linear and convolutional layers (actlab's MLP and ResNet
have none). The models are the paper's (:data:`~actlab.nn.classifiers.PAPER_SIZES`: App.
D.2's MLP of width 1024, App. D.3's ResNet-18) and each trains as App. D states for it
(:data:`TRAINING`: Adam for 5 epochs for the MLP, SGD with Nesterov momentum, a 5-epoch
warm-up and cosine annealing for ResNet-18). A config takes this through the fields of
:class:`ClassifierScale` (``size="paper"``, ``training="paper"``); its ``max_steps`` caps
every model's steps for a smoke run. The data are the user's CIFAR-10 python batches
(``--set data=DIR`` fills ``cifar_dir``).

The documents give no CIFAR-10 setting for a plain ViT (their "ViT" column is MaxViT-T on
ImageNet, App. D.5: ``accumulation-stop``'s preset, :mod:`actlab.experiments.imagenet_paper`)
nor for GPT-nano beside its own FineWeb run (``spikes``, ``lm-drift``), so those models are
outside these presets.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from actlab.errors import ConfigError
from actlab.nn.classifiers import CLASSIFIER_SIZES
from actlab.runner.cost import Workload
from actlab.runner.fields import CheckedConfig, checked
from actlab.runner.paper import DataNeed, PaperPreset, Setting, doc, ours
from actlab.train.settings import TrainSettings

BUG_OR_FEATURE = "Bug or Feature²"
TRAININGS = ("adam", "paper")
CIFAR10_TRAIN = 50_000  # images in CIFAR-10's five training batches

CIFAR10 = DataNeed(
    what="CIFAR-10", source=f"{BUG_OR_FEATURE} App. D.1",
    format="CIFAR-10's python version: a folder holding data_batch_1 .. data_batch_5 and "
           "test_batch (or its parent, with cifar-10-batches-py)",
    field="cifar_dir")


def _doc(where: str, value: Any, note: str = "") -> Setting:
    return doc(BUG_OR_FEATURE, where, value, note)


@dataclass
class ClassifierScale(CheckedConfig):
    """The fields that take a classifier experiment to the paper's models and training."""

    size: str = checked("cpu", choices=CLASSIFIER_SIZES)  # nn.classifiers' named sizes
    training: str = checked("adam", choices=TRAININGS)  # paper: TRAINING, per model kind
    max_steps: int = checked(0, ge=0)  # > 0: caps each model's paper steps (smoke runs)

    def check_paper_kinds(self, kinds: list[str]) -> None:
        """``ConfigError`` when ``training="paper"`` meets a model without a paper training."""
        missing = [k for k in kinds if k not in TRAINING] if self.training == "paper" else []
        if missing:
            raise ConfigError("training", f"the documents state no CIFAR-10 training for "
                                          f"{', '.join(missing)}; models with one: "
                                          f"{', '.join(TRAINING)}")


# ------------------------------------------------------------------------ each model's training
MLP_TRAINING = {
    "optimizer": _doc("App. D.2", "adam", "'Adam (lr=10^-3, weight decay 10^-4)'"),
    "lr": _doc("App. D.2", 1e-3),
    "weight_decay": _doc("App. D.2", 1e-4),
    "epochs": _doc("App. D.2", 5, "'Trained for 5 epochs'"),
    "schedule": ours("constant", "App. D.2 names no schedule"),
}
MLP_SKIP_TRAINING = {
    **MLP_TRAINING,
    "optimizer": _doc("App. B.1.3", "adam", "the MLP with a skip connection 'with Adam'"),
    "lr": _doc("App. B.1.3", 1e-3, "'(lr=10^-3)'"),
    "weight_decay": ours(1e-4, "App. D.2's, the MLP it adds skips to"),
    "epochs": ours(5, "App. D.2's, the MLP it adds skips to"),
}
RESNET_TRAINING = {
    "optimizer": _doc("App. D.3", "nesterov", "'SGD with Nesterov momentum (0.9)'"),
    "momentum": _doc("App. D.3", 0.9),
    "weight_decay": _doc("App. D.3", 5e-4, "'weight decay 5x10^-4'"),
    "lr": _doc("App. D.3", 1e-3, "the activation comparison: 'from 10^-4 to 10^-3'"),
    "warmup_from": _doc("App. D.3", 0.1, "the warm-up starts at 10^-4 = 0.1 x 10^-3"),
    "warmup_epochs": _doc("App. D.3", 5, "'5-epoch linear warmup'"),
    "schedule": _doc("App. D.3", "cosine", "'followed by cosine annealing'"),
    "min_lr_ratio": ours(0.0, "annealed to 0, PyTorch's CosineAnnealingLR default"),
    "epochs": ours(50, "App. D.3 states 50 epochs for its Top-K runs only"),
}
RESNET_TOPK_TRAINING = {
    **RESNET_TRAINING,
    "lr": _doc("App. D.3", 5e-2, "Top-K: 'initial learning rate 5x10^-2'"),
    "warmup_from": ours(0.0, "the Top-K runs' warm-up start is not stated: from 0"),
    "epochs": _doc("App. D.3", 50, "Top-K: 'for 50 epochs'"),
}
TRAINING: dict[str, dict[str, Setting]] = {
    "mlp": MLP_TRAINING, "mlp-skip": MLP_SKIP_TRAINING, "resnet": RESNET_TRAINING}
EPOCH_KEYS = ("epochs", "warmup_epochs")


def epoch_steps(n_train: int, batch_size: int) -> int:
    """Updates in one epoch of the engine's sampler (the last partial batch dropped)."""
    return max(1, n_train // batch_size)


def paper_settings(table: dict[str, Setting], *, n_train: int, batch_size: int,
                   max_steps: int = 0) -> TrainSettings:
    """:class:`TrainSettings` of a training ``table`` (epochs become steps of ``n_train``
    images in batches of ``batch_size``; ``max_steps`` > 0 caps them)."""
    values = {k: s.value for k, s in table.items() if k not in EPOCH_KEYS}
    per_epoch = epoch_steps(n_train, batch_size)
    steps = max(1, round(table["epochs"].value * per_epoch))
    warmup = round(table["warmup_epochs"].value * per_epoch) if "warmup_epochs" in table else 0
    if max_steps:
        steps = min(steps, max_steps)
    return TrainSettings(steps=steps, warmup=min(warmup, steps), batch_size=batch_size, **values)


def classifier_settings(config: Any, kind: str, n_train: int, *,
                        topk: bool = False) -> TrainSettings:
    """A classifier experiment's settings for a model of ``kind``: the paper's
    (:data:`TRAINING`; ResNet-18's Top-K runs with ``topk``) under ``training="paper"``,
    else the recipe's Adam (:func:`~actlab.recipes.image_classifier.adam_settings`)."""
    from actlab.recipes.image_classifier import adam_settings

    if config.training != "paper":
        return adam_settings(config, kind)
    table = RESNET_TOPK_TRAINING if kind == "resnet" and topk else TRAINING[kind]
    return paper_settings(table, n_train=n_train, batch_size=config.batch_size,
                          max_steps=config.max_steps)


def training_notes(tables: dict[str, dict[str, Setting]]) -> tuple[str, ...]:
    """One note per model: every value of its training with its source."""
    return tuple(f"{kind} trains with " + "; ".join(f"{name} = {s.value} ({s.source})"
                                                 for name, s in table.items())
                 for kind, table in tables.items())


# ------------------------------------------------------------------------ the presets
CIFAR_MODELS = PaperPreset({
    "size": _doc("App. D.2-D.3", "paper", "the MLP of width d = 1024 (D.2), ResNet-18 with "
                                          "64-128-256-512 channels (D.3)"),
    "training": _doc("App. D.2-D.3", "paper", "each model's optimizer, schedule and epochs "
                                              "(the notes list them)"),
    "batch_size": _doc("App. D.1", 128, "'a training batch size of 128'"),
}, data=CIFAR10, notes=training_notes(TRAINING) + (
    "No vit or gpt: the documents train no plain ViT on CIFAR-10 (their ViT is MaxViT-T on "
    "ImageNet, accumulation-stop's preset) and GPT-nano on FineWeb (spikes, lm-drift).",))

SIX_ACTIVATIONS = ["relu", "gelu", "silu", "relu2", "noisy_relu", "sugar"]

SPARSE_ACTIVATIONS = CIFAR_MODELS.extend({
    "setups": _doc("§5.1, Table 1", ["mlp:none", "mlp:rmsnorm", "mlp:layernorm",
                                     "resnet:batchnorm"],
                   "the MLP without a norm, with RMSNorm and with LayerNorm, ResNet-18 with "
                   "BatchNorm; Table 1's MaxViT-T and GPT-nano columns are not CIFAR-10"),
    "activations": _doc("§5, App. D.3", SIX_ACTIVATIONS, "'six activation functions': ReLU, "
                        "GELU, SiLU, ReLU2, NoisyReLU, SUGARBSiLU"),
})

SPARSITY = CIFAR_MODELS.extend({
    "models": _doc("§4, App. B.2 (Tables 4-5)", ["mlp", "mlp-skip", "resnet"],
                   "MLP, MLP with skip, ResNet-18; the MaxViT-T and GPT-nano rows are not "
                   "CIFAR-10"),
    "topk_levels": _doc("App. D.3", [0.01, 0.05, 0.1, 0.15, 0.2],
                        "'Five retention levels ... K in {0.01, 0.05, 0.10, 0.15, 0.20}'"),
    "percentile_levels": ours([0.1, 0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 0.98],
                              "the paper lists no percentile levels: our grid"),
    "frozen_models": ours([], "the frozen-threshold Top-K is our variant, not a setting of "
                              "the paper's sweep"),
    "channel_levels": ours([0.2, 0.1, 0.05], "App. B.2 reports per-channel (structured) "
                                             "sparsity at 95% (K = 0.05); the other levels "
                                             "are ours, from D.3's K set"),
}, notes=("ResNet-18 trains at App. D.3's Top-K setting for every point of the sweep (lr "
          "5x10^-2, 50 epochs; ours for its Percentile Centering points and its per-channel "
          "(structured) Top-K points, App. B.2, whose channel score is ours: the spatial "
          "mean).",))

RELUFICATION = CIFAR_MODELS.extend({
    "models": ours(["mlp", "resnet"], "Table 3's models are not in the text: the CIFAR-10 "
                                      "models of Table 1"),
    "finetune_epochs": _doc("§5.1, Table 3", 1, "'via one epoch of fine-tuning'"),
    "finetune_lr": ours(1e-3, "the fine-tuning's optimizer and rate are not stated: Adam at "
                              "1e-3"),
})


DRIFT = PaperPreset({
    "conditions": _doc("App. D.2", ["main", "digits"],
                       "'Random data (MSE)' and 'CIFAR-10 (cross-entropy)'; the real-data "
                       "condition ('digits') reads CIFAR-10 from cifar_dir"),
    "depth": _doc("App. D.2", 5, "'5 repeated blocks of the form Linear(d, d) -> [Act]'"),
    "hidden": _doc("App. D.2", 128, "random data: 'Hidden dimension d=128'"),
    "optimizer": _doc("App. D.2", "sgd", "random data: 'SGD (lr=0.01)'"),
    "lr": _doc("App. D.2", 0.01),
    "real_hidden": _doc("App. D.2", 1024, "CIFAR-10: 'hidden dimension d=1024'"),
    "digits_optimizer": _doc("App. D.2", "adam", "CIFAR-10: 'Adam (lr=10^-3, weight decay "
                                                 "10^-4)'"),
    "digits_lr": _doc("App. D.2", 1e-3),
    "digits_weight_decay": _doc("App. D.2", 1e-4),
    "epochs": _doc("App. D.2", 5, "'Trained for 5 epochs' (CIFAR-10), 'trained for 5 epochs' "
                                  "(random data)"),
    "batch_size": _doc("App. D.1", 128, "'a training batch size of 128'"),
    "n_random": ours(12_800, "the random set's size is not stated"),
    "in_dim": ours(128, "the random inputs' dimension is not stated"),
    "out_dim": ours(10, "the random targets' dimension is not stated"),
    "init": ours("he", "the initialisation is not stated; with PyTorch's default the drift "
                       "nearly vanishes in this MLP (the default-init condition)"),
}, data=CIFAR10, seeds=_doc("App. D.2", 5, "'Trajectories averaged across 5 runs'"), notes=(
    "Our random-data loss is half the summed squared error per example (the paper: 'MSE'), "
    "the same gradient direction at another scale.",
    "The default-init, skip and sweep conditions are ours or other figures' (Fig. 1's "
    "optimizer sweep and App. B.1.3's skip MLP state no full setting) and are left out.",))


# ------------------------------------------------------------------------ plan
def cifar_shape(config: Any) -> SimpleNamespace:
    """The data's shapes without reading images: CIFAR-10's when ``cifar_dir`` is set (its
    50,000 training images, or ``cifar_limit``), else the digits'."""
    if config.cifar_dir:
        n = min(config.cifar_limit or CIFAR10_TRAIN, CIFAR10_TRAIN)
        return SimpleNamespace(image_shape=(3, 32, 32), in_features=3072, num_classes=10,
                               n_train=n, n_test=10_000)
    from actlab.data.digits import load_digits

    data = load_digits()
    return SimpleNamespace(image_shape=tuple(data.x_train.shape[1:]),
                           in_features=data.in_features, num_classes=data.num_classes,
                           n_train=len(data.x_train), n_test=len(data.x_test))


def classifier_workloads(config: Any, kind: str, model_args: dict[str, Any], *,
                         topk: bool = False, models: int = 1, label: str = "",
                         extra_steps: int = 0) -> list[Workload]:
    """What one seed of a classifier unit trains: ``models`` models of ``kind`` built with
    ``model_args``, with the test set's evaluation and activation statistics (two passes)
    priced; ``extra_steps`` more updates (a fine-tuning)."""
    from torch import empty

    from actlab.nn.classifiers import build_classifier

    data = cifar_shape(config)
    settings = classifier_settings(config, kind, data.n_train, topk=topk)

    def build() -> Any:
        return build_classifier(kind, data, size=config.size, **model_args)

    def example(n: int) -> tuple:
        return (empty(n, *data.image_shape),)

    return [Workload(label or f"{kind} ({config.size})", build, example,
                     settings.steps + extra_steps, settings.batch_size, settings.optimizer,
                     models=models, eval_samples=2 * data.n_test, sample="image")]
