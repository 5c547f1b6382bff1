"""Data sets available offline and loaders for user-supplied files (paths checked before a run
starts). Names are imported on first use."""

from __future__ import annotations

from actlab._lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "ImageData": ".digits",
    "load_digits": ".digits",
    "load_cifar10": ".cifar",
    "load_image_data": ".images",
    "ImageFolderData": ".image_folder",
    "load_image_folder": ".image_folder",
    "ImageStream": ".image_stream",
    "ImageTransform": ".augment",
    "Mixing": ".mixing",
    "LatentShards": ".latents",
    "two_spirals": ".spirals",
    "GaussianStream": ".synthetic",
    "gaussian_inputs": ".synthetic",
    "seed_generator": ".synthetic",
    "EpochBatches": ".sampling",
    "TextCorpus": ".text",
    "load_corpus": ".text",
    "text_corpus": ".text",
    "TokenStream": ".shards",
    "write_shards": ".shards",
})
