"""The ImageNet classifiers of the papers at their settings (``--paper``) and what they cost
(``actlab plan``): ViT-Base for ``vit-shift`` and MaxViT-T for ``accumulation-stop``.

* :data:`VIT_SHIFT` -- "Rethinking Activation Functions" §4.1 trains ViT-Base "for 300 epochs",
  "Following the ImageNet-1K training protocol of Zhu et al. (2025)": the recipe of that
  paper's code (jiachenzhu/DyT: its README's ViT-B command, ``main.py``'s defaults,
  ``optim_factory.py``), which builds timm's ``vit_base_patch16_224`` and timm's training
  transform. Everything beyond the model, the data and the length is that code's, and says so.
* :data:`ACCUMULATION_STOP` -- "Bug or Feature²" App. D.5's MaxViT-T: 60 epochs of AdamW at
  6e-4 with weight decay 0.1 under OneCycleLR (:data:`MAXVIT_TRAINING`), RandAugment (N = 2,
  M = 9), App. D.1's 224 x 224 center crops and bfloat16; Accumulation Stop at §7's 50 %
  shift.

Both read ImageNet as an image folder with ``train/`` and ``val/`` class folders
(:mod:`actlab.data.image_stream`), streamed: nothing holds the data set in memory.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from actlab.experiments.classifier_paper import paper_settings
from actlab.runner.cost import Workload
from actlab.runner.paper import DataNeed, PaperPreset, Setting, code, doc, ours
from actlab.train.settings import TrainSettings

RETHINKING = "Rethinking Activation Functions"
BUG_OR_FEATURE = "Bug or Feature²"
DYT_README = "jiachenzhu/DyT README.md (ViT-B)"
DYT_MAIN = "jiachenzhu/DyT main.py"
TIMM_VIT = "timm vision_transformer.py vit_base_patch16_224"
FOLDER_PREFIX = "folder:"

FOLDER_FORMAT = ("an image folder as torchvision's ImageFolder reads it: DIR/train/<class>/"
                 "<image> and DIR/val/<class>/<image> (.png, .jpg, .jpeg, .bmp, .webp), the "
                 "same classes in both")

IMAGENET_VIT = DataNeed(what="ImageNet-1K", source=f"{RETHINKING} §4.1 'the ImageNet-1K "
                                                   f"training protocol of Zhu et al. (2025)'",
                        format=FOLDER_FORMAT, prefix=FOLDER_PREFIX)
IMAGENET_MAXVIT = DataNeed(what="ImageNet-1K", source=f"{BUG_OR_FEATURE} App. D.1 "
                                                      f"('large-scale classification "
                                                      f"experiments use ImageNet-1K')",
                           format=FOLDER_FORMAT, field="image_dir")

VIT_SHIFT = PaperPreset({
    "image_size": code(DYT_MAIN, 224, "--input_size"),
    "patch_size": code(TIMM_VIT, 16, "ViT-Base/16: the README's --model vit_base_patch16_224"),
    "dim": code(TIMM_VIT, 768, "embed_dim of ViT-Base, the model of §4.1"),
    "depth": code(TIMM_VIT, 12),
    "heads": code(TIMM_VIT, 12),
    "mlp_ratio": code(TIMM_VIT, 4.0),
    "bias": code(TIMM_VIT, True, "qkv_bias=True; every linear layer has a bias"),
    "drop_path": code(DYT_README, 0.1, "--drop_path 0.1"),
    "epochs": doc(RETHINKING, "§4.1", 300, "'we train ViT-Base ... for 300 epochs'"),
    "batch_size": code(DYT_README, 4096, "--batch_size 64 on --nnodes=8 x --nproc_per_node=8, "
                                         "--update_freq 1"),
    "optimizer": code(DYT_MAIN, "adamw", "--opt"),
    "lr": code(DYT_README, 4e-3, "--lr 4e-3 (main.py does not scale it with the batch)"),
    "weight_decay": code(DYT_MAIN, 0.05, "--weight_decay"),
    "decay_vectors": code("jiachenzhu/DyT optim_factory.py", False,
                          "1-D parameters and biases get no weight decay"),
    "schedule": code("jiachenzhu/DyT utils.py", "cosine", "cosine_scheduler, per step"),
    "warmup_epochs": code(DYT_MAIN, 20, "--warmup_epochs, linear from 0"),
    "min_lr_ratio": code(DYT_MAIN, 1e-6 / 4e-3, "--min_lr 1e-6 of --lr 4e-3"),
    "dtype": code(DYT_MAIN, "float32", "--use_amp false by default, the README sets none"),
    "crop": code("jiachenzhu/DyT datasets.py", "random-resized", "timm's create_transform: "
                 "RandomResizedCropAndInterpolation, bicubic (--train_interpolation)"),
    "randaugment": code(DYT_MAIN, "rand-m9-mstd0.5-inc1", "--aa (timm turns colour jitter off "
                                                          "under RandAugment)"),
    "erase": code(DYT_MAIN, 0.25, "--reprob, --remode pixel, --recount 1"),
    "mixup": code(DYT_MAIN, 0.8, "--mixup"),
    "cutmix": code(DYT_MAIN, 1.0, "--cutmix (--mixup_prob 1, --mixup_switch_prob 0.5, "
                                  "--mixup_mode batch)"),
    "smoothing": code(DYT_MAIN, 0.1, "--smoothing"),
    "log_points": ours(40, "the default's checkpoints (log-spaced over training)"),
    "eval_images": ours(0, "the whole validation split at every checkpoint"),
    "train_eval_images": ours(10_000, "the training loss at a checkpoint on 10,000 training "
                                      "images spread over the classes, not all 1.28 M"),
    "probe_images": ours(256, "hidden-state means on 256 validation images"),
}, data=IMAGENET_VIT, notes=(
    "Not kept from DyT's recipe: its EMA of the weights (--model_ema true, decay 0.9999), "
    "timm's exemption of the position embedding and class token from weight decay, timm's "
    "truncated-normal initialisation and LayerNorm eps 1e-6 (ours: actlab's ViT init, "
    "eps 1e-5).",
    "Mixup / CutMix pair each image with its neighbour in the randomly ordered batch (timm: "
    "with the mirrored image of each GPU's batch), so --nproc does not change the mixing; "
    "stochastic depth draws from each rank's generator, so with drop_path > 0 a run depends "
    "on --nproc.",
    "Evaluation: timm's resize of the shorter side to 256, bicubic, and the central 224 "
    "square, ImageNet's normalisation.",
))

MAXVIT_TRAINING: dict[str, Setting] = {
    "optimizer": doc(BUG_OR_FEATURE, "App. D.5", "adamw", "'AdamW (lr=6x10^-4, weight decay "
                                                          "0.1)'"),
    "lr": doc(BUG_OR_FEATURE, "App. D.5", 6e-4),
    "weight_decay": doc(BUG_OR_FEATURE, "App. D.5", 0.1),
    "schedule": doc(BUG_OR_FEATURE, "App. D.5", "onecycle", "'under a OneCycleLR schedule': "
                    "PyTorch's defaults (its momentum cycle not applied, ours)"),
    "epochs": doc(BUG_OR_FEATURE, "App. D.5", 60, "'Training runs for 60 epochs'"),
}

ACCUMULATION_STOP = PaperPreset({
    "models": doc(BUG_OR_FEATURE, "§7, App. D.5", ["maxvit"], "MaxViT-T, the classifier of "
                  "'We evaluate this approach on DiT-S/2 and MaxViT' (DiT-S/2: dit-percentile)"),
    "size": doc(BUG_OR_FEATURE, "App. D.5", "paper", "MaxViT-T, 'a 2-2-5-2 block structure'"),
    "training": doc(BUG_OR_FEATURE, "App. D.5", "paper", "AdamW, OneCycleLR, 60 epochs, "
                                                         "bfloat16 (the notes list them)"),
    "image_size": doc(BUG_OR_FEATURE, "App. D.1", 224, "'center-cropped and resized to ... "
                                                       "224x224 (MaxViT)'"),
    "randaugment": doc(BUG_OR_FEATURE, "App. D.5", "rand-n2-m9", "'RandAugment protocol (N=2, "
                       "M=9)'; timm's ops, each applied with probability 0.5 (ours)"),
    "q": doc(BUG_OR_FEATURE, "§7", 0.5, "'Given the 50% shift'"),
    "dtype": doc(BUG_OR_FEATURE, "App. D.1", "bfloat16", "'All models are trained in bfloat16 "
                                                         "mixed precision'"),
    "warmup": ours(50_000, "T_warm is stated for DiT-S/2 only ('T_warm=50,000 steps'); "
                           "App. D.5's four-phase protocol gives MaxViT's no length"),
    "batch_size": ours(128, "App. D.5 states none; App. D.1's 128 for its classification "
                            "experiments"),
}, data=IMAGENET_MAXVIT, notes=(
    "maxvit trains with " + "; ".join(f"{name} = {s.value} ({s.source})"
                                      for name, s in MAXVIT_TRAINING.items()),
    "The conditions' norms replace MaxViT's transformer pre-norms; its convolutions keep "
    "BatchNorm (actlab.nn.maxvit). Throughput is timed on CUDA events on a GPU.",
))


def maxvit_settings(config: Any, n_train: int) -> TrainSettings:
    """MaxViT-T's training of App. D.5 (:data:`MAXVIT_TRAINING`) over ``n_train`` images in
    batches of ``config.batch_size`` (``config.max_steps`` > 0 caps the steps)."""
    return paper_settings({**MAXVIT_TRAINING, "decay_vectors": ours(True, "not stated")},
                          n_train=n_train, batch_size=config.batch_size,
                          max_steps=config.max_steps)


def folder_shape(root: str, image_size: int) -> SimpleNamespace:
    """Shapes and counts of an image folder (its files listed, none read): ``image_shape``,
    ``in_features``, ``num_classes``, ``n_train``, ``n_val``."""
    from actlab.data.image_folder import image_folder_index
    from actlab.data.image_stream import split_folders

    splits = split_folders(root)
    classes, train, _ = image_folder_index(splits["train"])
    _, val, _ = image_folder_index(splits["val"])
    return SimpleNamespace(image_shape=(3, image_size, image_size),
                           in_features=3 * image_size ** 2, num_classes=len(classes),
                           n_train=len(train), n_val=len(val))


def image_workload(label: str, build: Any, image_shape: tuple[int, ...], steps: int,
                   batch: int, optimizer: str, eval_samples: int) -> Workload:
    """A classifier's workload on images of ``image_shape``."""
    from torch import empty

    return Workload(label, build, lambda n: (empty(n, *image_shape),), steps, batch, optimizer,
                    eval_samples=eval_samples, sample="image")
