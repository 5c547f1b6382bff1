"""Configuration of the bias-component experiment (its own module, so the training and
summary helpers can name it without importing the experiment)."""

from __future__ import annotations

from dataclasses import dataclass, field

from actlab.errors import ConfigError
from actlab.experiments._common import check_activation_specs
from actlab.train.optim import OPTIMIZERS


@dataclass
class BiasComponentConfig:
    """Scale and settings of the bias-component study (see the module docstring)."""

    unshifted: str = "relu"
    shifted: str = "relu:shift=theory"
    data_dir: str | None = None  # CIFAR-10 python files; digits when unset
    image_size: int = 16  # digits are upsampled to this size
    limit_train: int = 10000  # CIFAR-10 training images used
    widths: list[int] = field(default_factory=lambda: [16, 64])
    convs_per_stage: int = 2
    init: str = "he"  # he (fan_out, as torchvision's VGG) or any actlab.init scheme
    steps: int = 3000
    batch_size: int = 64
    optimizer: str = "adam"
    lr: float = 1e-3
    log_points: int = 40
    loss_every: int = 10
    n_eval: int = 256  # held-out images for loss and similarity
    n_show: int = 4  # images in the reconstruction grids
    grid_points: int = 6  # checkpoints shown in the grids
    min_fit: float = 0.5  # similarity landmarks use checkpoints with loss <= min_fit * initial
    threads: int = 1

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "log_points", "loss_every", "n_eval", "n_show",
                     "grid_points", "threads", "convs_per_stage", "limit_train"):
            if getattr(self, name) < 1:
                raise ConfigError(name, f"must be >= 1, got {getattr(self, name)}")
        if self.image_size < 8:
            raise ConfigError("image_size", f"must be >= 8 (digits are 8x8), got {self.image_size}")
        if not self.widths or min(self.widths) < 1:
            raise ConfigError("widths", f"need positive channel counts, got {self.widths}")
        if self.image_size % 2 ** (len(self.widths) - 1):
            raise ConfigError("image_size", f"must be divisible by 2**(len(widths)-1) = "
                              f"{2 ** (len(self.widths) - 1)}, got {self.image_size}")
        from actlab.init import SCHEMES

        if self.init not in SCHEMES:
            raise ConfigError("init", f"must be one of {', '.join(SCHEMES)}, got {self.init!r}")
        if not 0 < self.min_fit <= 1:
            raise ConfigError("min_fit", f"must be in (0, 1], got {self.min_fit}")
        if not self.lr > 0:
            raise ConfigError("lr", f"must be > 0, got {self.lr}")
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError("optimizer", f"must be one of {', '.join(OPTIMIZERS)}, "
                              f"got {self.optimizer!r}")
        for name in ("unshifted", "shifted"):
            check_activation_specs([getattr(self, name)], field=name)
        if self.data_dir is not None:
            from actlab.data.cifar import find_cifar10

            try:
                find_cifar10(self.data_dir)
            except FileNotFoundError as exc:
                raise ConfigError("data_dir", str(exc)) from None
