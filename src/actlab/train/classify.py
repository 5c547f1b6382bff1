"""A plain supervised trainer for the small models: minibatch SGD / momentum / Adam on tensors.

:func:`train` runs a fixed number of steps over in-memory tensors with seeded batch order,
calls ``on_step`` after every optimizer step (e.g. ``probe.step``) and stops, recording the
run as ``diverged``, at the first non-finite loss instead of raising. :func:`evaluate`
reports loss and accuracy; :func:`activation_statistics` measures, over a whole evaluation
set, each activation site's share of negative inputs and of (near-)zero outputs with
:class:`actlab.Probe`.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from actlab.errors import did_you_mean

OPTIMIZERS = ("sgd", "momentum", "nesterov", "adam", "adamw")
LOSSES = ("cross_entropy", "mse")
STATUS_OK = "ok"
STATUS_DIVERGED = "diverged"


def _check(field_name: str, value: str, valid: tuple[str, ...]) -> str:
    if value not in valid:
        hint = did_you_mean(value, valid, n=3, cutoff=0.4, prefix="; ")
        raise ValueError(f"{field_name}: unknown {value!r}{hint} (valid: {', '.join(valid)})")
    return value


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run the block with ``n`` intra-op threads (``None``: unchanged), then restore.

    Small models train fastest on one thread: their matrix products are too small to
    share, and on a busy machine extra threads mostly spin.
    """
    previous = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def make_optimizer(name: str, params: Iterable[nn.Parameter], lr: float, *,
                   momentum: float = 0.9, weight_decay: float = 0.0) -> torch.optim.Optimizer:
    """``sgd`` (plain), ``momentum`` (heavy ball), ``nesterov``, ``adam`` or ``adamw``."""
    _check("optimizer", name, OPTIMIZERS)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, weight_decay=weight_decay)
    if name in ("momentum", "nesterov"):
        return torch.optim.SGD(params, lr=lr, momentum=momentum, nesterov=name == "nesterov",
                               weight_decay=weight_decay)
    cls = torch.optim.Adam if name == "adam" else torch.optim.AdamW
    return cls(params, lr=lr, weight_decay=weight_decay)


def loss_function(name: str) -> Callable[[Tensor, Tensor], Tensor]:
    """``cross_entropy`` (integer labels) or ``mse`` (the seed's ``0.5 * ||f - y||^2`` per
    example, averaged over the batch)."""
    _check("loss", name, LOSSES)
    if name == "cross_entropy":
        return F.cross_entropy
    return lambda out, y: 0.5 * (out - y).pow(2).sum(-1).mean()


def minibatches(n: int, batch_size: int, steps: int, generator: torch.Generator) -> Iterator[Tensor]:
    """``steps`` index batches: epochs of a seeded permutation, the last partial batch dropped
    (all of ``n`` when ``batch_size >= n``)."""
    batch_size = min(batch_size, n)
    done = 0
    while done < steps:
        order = torch.randperm(n, generator=generator)
        for start in range(0, n - batch_size + 1, batch_size):
            if done == steps:
                return
            yield order[start:start + batch_size]
            done += 1


@dataclass
class TrainSettings:
    """How to train: optimizer, learning rate, steps, batch size and loss."""

    optimizer: str = "adam"
    lr: float = 1e-3
    momentum: float = 0.9
    weight_decay: float = 0.0
    steps: int = 500
    batch_size: int = 128
    loss: str = "cross_entropy"

    def __post_init__(self) -> None:
        _check("optimizer", self.optimizer, OPTIMIZERS)
        _check("loss", self.loss, LOSSES)
        if self.lr <= 0 or self.steps < 0 or self.batch_size < 1:
            raise ValueError(f"need lr > 0, steps >= 0, batch_size >= 1; got {self.lr}, "
                             f"{self.steps}, {self.batch_size}")


@dataclass
class TrainResult:
    """Outcome of :func:`train`: status (``ok``/``diverged``), steps done, loss per step."""

    status: str
    steps: int
    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def final_loss(self) -> float:
        """Mean loss over the last 10 steps (``nan`` if none)."""
        tail = self.losses[-10:]
        return float(sum(tail) / len(tail)) if tail else math.nan

    @property
    def steps_per_second(self) -> float:
        """Training throughput."""
        return self.steps / self.seconds if self.seconds > 0 else math.nan


def train(model: nn.Module, x: Tensor, y: Tensor, settings: TrainSettings, *,
          generator: torch.Generator, on_step: Callable[[int, float], None] | None = None,
          progress: Callable[..., Iterable] | None = None) -> TrainResult:
    """Train ``model`` in place on ``(x, y)``; see the module docstring.

    The model is put in training mode for the run and its previous mode is restored.
    ``on_step(step, loss)`` runs after each optimizer step. ``progress`` wraps the step
    iterator (e.g. a tqdm bar).
    """
    criterion = loss_function(settings.loss)
    optimizer = make_optimizer(settings.optimizer, model.parameters(), settings.lr,
                               momentum=settings.momentum, weight_decay=settings.weight_decay)
    was_training = model.training
    model.train()
    result = TrainResult(STATUS_OK, 0)
    batches: Iterable[Tensor] = minibatches(len(x), settings.batch_size, settings.steps, generator)
    if progress is not None:
        batches = progress(batches, total=settings.steps)
    start = time.perf_counter()
    try:
        for step, idx in enumerate(batches):
            optimizer.zero_grad(set_to_none=True)
            loss = criterion(model(x[idx]), y[idx])
            value = float(loss.detach())
            if not math.isfinite(value):
                result.status = STATUS_DIVERGED
                result.losses.append(value)
                break
            loss.backward()
            optimizer.step()
            result.losses.append(value)
            result.steps = step + 1
            if on_step is not None:
                on_step(step, value)
    finally:
        result.seconds = time.perf_counter() - start
        model.train(was_training)
    return result


@torch.no_grad()
def evaluate(model: nn.Module, x: Tensor, y: Tensor, *, loss: str = "cross_entropy",
             batch_size: int = 512) -> dict[str, float]:
    """Loss and (for cross-entropy) accuracy on ``(x, y)`` in eval mode; the mode is restored."""
    criterion = loss_function(loss)
    was_training = model.training
    model.eval()
    total, correct, n = 0.0, 0, 0
    try:
        for start in range(0, len(x), batch_size):
            out = model(x[start:start + batch_size])
            target = y[start:start + batch_size]
            total += float(criterion(out, target)) * len(target)
            if loss == "cross_entropy":
                correct += int((out.argmax(-1) == target).sum())
            n += len(target)
    finally:
        model.train(was_training)
    metrics = {"loss": total / n}
    if loss == "cross_entropy":
        metrics["accuracy"] = correct / n
    return metrics


@torch.no_grad()
def activation_statistics(model: nn.Module, x: Tensor, *, batch_size: int = 512,
                          metrics: tuple[str, ...] = ("preact_neg_frac", "sparsity"),
                          eval_mode: bool = True) -> dict[str, dict[str, float]]:
    """Per activation site, the probe's ``metrics`` pooled over all of ``x``, plus ``"mean"``.

    ``preact_neg_frac`` is the share of negative activation inputs, ``sparsity`` the share of
    outputs with ``|a| < 1e-7`` (seed 003 App. D.1). ``"mean"`` averages the sites. Runs in
    eval mode unless ``eval_mode=False``; the model's mode is restored.
    """
    from actlab.probe.probe import Probe

    was_training = model.training
    model.train(not eval_mode)
    probe = Probe(model, every=[0], metrics=list(metrics), weights=False)
    try:
        for start in range(0, len(x), batch_size):
            model(x[start:start + batch_size])
        probe.step()
        table = probe.table()
    finally:
        probe.close()
        model.train(was_training)
    stats: dict[str, dict[str, float]] = {}
    for row in table.itertuples():
        stats.setdefault(row.layer, {})[row.metric] = float(row.value)
    if stats:
        stats["mean"] = {m: float(sum(s[m] for s in stats.values() if m in s) /
                                  max(1, sum(m in s for s in stats.values()))) for m in metrics}
    return stats


MODEL_KINDS = ("mlp", "mlp-skip", "resnet", "vit")


def check_data_fields(cifar_dir: str, cifar_limit: int) -> None:
    """Validate the ``cifar_dir``/``cifar_limit`` config fields (``ConfigError`` naming them)."""
    from actlab.errors import ConfigError

    if cifar_limit < 0:
        raise ConfigError("cifar_limit", f"must be >= 0, got {cifar_limit}")
    if cifar_dir:
        from actlab.data.cifar import find_cifar10

        try:
            find_cifar10(cifar_dir)
        except FileNotFoundError as exc:
            raise ConfigError("cifar_dir", str(exc)) from None


def load_image_data(cifar_dir: str = "", limit_train: int | None = None,
                    limit_test: int | None = None):
    """scikit-learn's digits, or CIFAR-10 from ``cifar_dir`` when one is given (never downloaded)."""
    if cifar_dir:
        from actlab.data.cifar import load_cifar10

        return load_cifar10(cifar_dir, limit_train=limit_train, limit_test=limit_test)
    from actlab.data.digits import load_digits

    return load_digits().subset(limit_train, limit_test)


def build_classifier(kind: str, data, activation: str, *, pre_norm: str | None = None,
                     norm: str | None = None, norm_bias: bool = True, hidden: int = 128,
                     seed: int = 0) -> nn.Module:
    """A CPU-scale classifier for ``data`` (an :class:`~actlab.data.digits.ImageData`).

    ``kind``: ``mlp`` / ``mlp-skip`` (the seed's 5-block MLP, hidden ``hidden``), ``resnet``
    (widths 8-16-32, BatchNorm) or ``vit`` (width 32, 2 blocks, 2 heads, 16 patches).
    ``pre_norm`` is the norm directly before every activation (the MLP's and ResNet's norm,
    the ViT's ``mlp_norm``), ``norm`` the ViT's pre-norms (``layernorm`` by default);
    ``None`` keeps each model's default. Parameters are drawn from ``seed``.
    """
    from actlab.nn.mlp import MLP
    from actlab.nn.resnet import ResNet
    from actlab.nn.vit import ViT

    _check("model", kind, MODEL_KINDS)
    channels, size, _ = data.image_shape
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        if kind in ("mlp", "mlp-skip"):
            return MLP(data.in_features, data.num_classes, hidden=hidden, depth=5,
                       activation=activation, norm=pre_norm or "none", skip=kind == "mlp-skip",
                       norm_bias=norm_bias)
        if kind == "resnet":
            return ResNet(channels, data.num_classes, widths=(8, 16, 32), blocks=1,
                          activation=activation, norm=pre_norm or "batchnorm", norm_bias=norm_bias)
        return ViT(image_size=size, patch_size=max(1, size // 4), in_channels=channels, num_classes=data.num_classes,
                   dim=32, depth=2, heads=2, activation=activation, norm=norm or "layernorm",
                   mlp_norm=pre_norm or "none", norm_bias=norm_bias)


@dataclass
class FitOutcome:
    """What :func:`fit_and_measure` found: accuracy and activation statistics on the test set."""

    status: str
    accuracy: float
    neg_frac: float
    sparsity: float
    steps: int
    seconds: float
    final_loss: float


def fit_and_measure(model: nn.Module, data, settings: TrainSettings, *, seed: int,
                    progress: Callable[..., Iterable] | None = None) -> FitOutcome:
    """Train ``model`` on ``data``'s training split, then measure test accuracy and the mean
    over activation sites of the negative-input share and the sparsity (eval mode).

    A diverged run returns ``status="diverged"`` with ``nan`` measurements.
    """
    torch.manual_seed(seed)  # noise inside activations (noisy_relu)
    result = train(model, data.x_train, data.y_train, settings,
                   generator=torch.Generator().manual_seed(seed), progress=progress)
    if result.status != STATUS_OK:
        return FitOutcome(result.status, math.nan, math.nan, math.nan, result.steps,
                          result.seconds, math.nan)
    accuracy = evaluate(model, data.x_test, data.y_test)["accuracy"]
    stats = activation_statistics(model, data.x_test).get("mean", {})
    return FitOutcome(STATUS_OK, accuracy, stats.get("preact_neg_frac", math.nan),
                      stats.get("sparsity", math.nan), result.steps, result.seconds,
                      result.final_loss)
