"""Image classification data: scikit-learn's digits, or CIFAR-10 from a local folder."""

from __future__ import annotations

from typing import Any


def load_image_data(cifar_dir: str = "", limit_train: int | None = None,
                    limit_test: int | None = None) -> Any:
    """scikit-learn's digits, or CIFAR-10 from ``cifar_dir`` when one is given (never downloaded)."""
    if cifar_dir:
        from actlab.data.cifar import load_cifar10

        return load_cifar10(cifar_dir, limit_train=limit_train, limit_test=limit_test)
    from actlab.data.digits import load_digits

    return load_digits().subset(limit_train, limit_test)
