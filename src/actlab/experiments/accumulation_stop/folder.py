"""``accumulation-stop`` on an image folder (``image_dir``, ImageNet for MaxViT-T): the
streams of the folder, center crops of ``image_size`` with the config's RandAugment (App. D.1,
D.5), and a stand-in for the in-memory data that tells the model builder the images' shape
and the training split's size."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any


def image_data(config: Any, seed: int) -> tuple[SimpleNamespace, Any]:
    """``(shape, streams)``: ``shape`` has the ``image_shape``, ``in_features``,
    ``num_classes`` and ``x_train`` length the experiment reads; ``streams`` the training
    and validation :class:`~actlab.data.image_stream.ImageStream` (close them after use)."""
    from actlab.data.augment import ImageTransform
    from actlab.recipes.stream_classifier import image_streams

    transform = ImageTransform(config.image_size, crop="center", hflip=0.0,
                               randaugment=config.randaugment, erase=0.0)
    streams = image_streams(config.image_dir, transform, batch_size=config.batch_size,
                            seed=seed, workers=config.workers)
    size = config.image_size
    shape = SimpleNamespace(image_shape=(3, size, size), in_features=3 * size * size,
                            num_classes=streams.num_classes, x_train=range(len(streams.train)))
    return shape, streams
