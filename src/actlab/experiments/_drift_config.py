"""Configuration of the drift experiment (its own module, so the summary helpers can name it
without importing the experiment)."""

from __future__ import annotations

from dataclasses import dataclass, field

from actlab.errors import ConfigError
from actlab.experiments._common import check_activation_specs, require_at_least_one
from actlab.train.optim import OPTIMIZERS

CONDITIONS = ("main", "default-init", "skip", "digits", "sweep")


@dataclass
class DriftConfig:
    """Scale and settings of the drift study (see the module docstring)."""

    activations: list[str] = field(default_factory=lambda: ["relu", "gelu", "silu", "tanh",
                                                            "noisy_relu", "sugar"])
    conditions: list[str] = field(default_factory=lambda: list(CONDITIONS))
    steps: int = 2000
    batch_size: int = 128
    hidden: int = 128
    depth: int = 5
    in_dim: int = 128
    out_dim: int = 10
    n_random: int = 12800
    optimizer: str = "sgd"
    lr: float = 0.01
    init: str = "he"
    compare_init: str = "torch-default"
    skip_optimizer: str = "adam"
    skip_lr: float = 1e-3
    digits_optimizer: str = "adam"
    digits_lr: float = 1e-3
    sweep: list[str] = field(default_factory=lambda: ["sgd:0.01", "sgd:0.05", "momentum:0.01",
                                                      "momentum:0.05", "adam:0.0001", "adam:0.001"])
    sweep_activations: list[str] = field(default_factory=lambda: ["relu", "gelu"])
    record_every: int = 100
    loss_every: int = 10
    threads: int = 1

    def __post_init__(self) -> None:
        from actlab.init import SCHEMES

        require_at_least_one(self, ("steps", "batch_size", "hidden", "in_dim", "out_dim", "n_random",
                                    "record_every", "loss_every", "threads", "depth"))
        if self.lr <= 0 or self.digits_lr <= 0 or self.skip_lr <= 0:
            raise ConfigError("lr", "learning rates must be > 0")
        for name in ("optimizer", "digits_optimizer", "skip_optimizer"):
            if getattr(self, name) not in OPTIMIZERS:
                raise ConfigError(name, f"must be one of {', '.join(OPTIMIZERS)}")
        for name in ("init", "compare_init"):
            if getattr(self, name) not in SCHEMES:
                raise ConfigError(name, f"must be one of {', '.join(SCHEMES)}, got {getattr(self, name)!r}")
        bad = [c for c in self.conditions if c not in CONDITIONS]
        if bad or not self.conditions:
            raise ConfigError("conditions", f"choose from {', '.join(CONDITIONS)}, got {bad or 'none'}")
        if not self.activations:
            raise ConfigError("activations", "need at least one activation")
        check_activation_specs(self.activations + self.sweep_activations)
        for item in self.sweep:
            parse_sweep_item(item)


def parse_sweep_item(item: str) -> tuple[str, float]:
    """``"momentum:0.01"`` -> ``("momentum", 0.01)``; ``ConfigError`` on bad input."""
    opt, _, lr = item.partition(":")
    if opt not in OPTIMIZERS:
        raise ConfigError("sweep", f"optimizer {opt!r} in {item!r} must be one of {', '.join(OPTIMIZERS)}")
    try:
        value = float(lr)
    except ValueError:
        raise ConfigError("sweep", f"{item!r}: expected optimizer:lr") from None
    if not value > 0:
        raise ConfigError("sweep", f"{item!r}: lr must be > 0")
    return opt, value
