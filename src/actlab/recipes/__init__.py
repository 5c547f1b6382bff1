"""Reusable train-and-measure recipes, one file each, shared by the experiments and usable on
their own.

- :mod:`~actlab.recipes.teacher_student`: paired unshifted/shifted students of one teacher,
  trained as one ensemble, with block statistics, gradient angles and landscapes.
- :mod:`~actlab.recipes.image_classifier`: MLP / ResNet / ViT on digits or CIFAR-10, trained
  and measured (activation statistics after training).
- :mod:`~actlab.recipes.spirals`: the handbook's plain binary SGD on the two spirals, one
  model or all seeds as one ensemble through ``EnsembleTrainer.fit``.
- :mod:`~actlab.recipes.language_model`: GPT on a text corpus (``train_gpt``, ``LMScale``,
  the probe forward pass, a ``torchrun`` entry point).
- :mod:`~actlab.recipes.autoencoder`: the VGG-style autoencoder and its bias-component
  measurements.
- :mod:`~actlab.recipes.drift_mlp`: a bias-free MLP trained with its weight drift recorded.
- :mod:`~actlab.recipes.diffusion`: training a diffusion model (``DiffusionLoss``,
  ``train_diffusion``); the process and samplers are :mod:`actlab.diffusion`.
- :mod:`~actlab.recipes.dit_protocol`: one condition of the DiT experiments trained and
  measured (``train_condition``); its config, data and model in
  :mod:`~actlab.recipes.dit_setup`.
- :mod:`~actlab.recipes.unit`: what a recipe that runs a whole unit receives and returns
  (``UnitContext``, ``UnitResult``).

The main entry point of each is exported here, imported on first use.
"""

from __future__ import annotations

from actlab._lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "train_students": ".teacher_student",
    "ImageTrainingConfig": ".image_classifier",
    "fit_and_measure": ".image_classifier",
    "train_binary_sgd": ".spirals",
    "train_binary_sgd_ensemble": ".spirals",
    "LMScale": ".language_model",
    "train_gpt": ".language_model",
    "train_autoencoder": ".autoencoder",
    "train_drift_mlp": ".drift_mlp",
    "DiffusionLoss": ".diffusion",
    "train_diffusion": ".diffusion",
    "train_condition": ".dit_protocol",
    "train_one_block": ".one_block",
    "run_gpt_cell": ".gpt_cell",
    "UnitContext": ".unit",
    "UnitResult": ".unit",
})
