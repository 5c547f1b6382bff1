"""``shift=measured``: set each activation's shift to its mean output at initialization.

"Rethinking Activation Functions" §2.1 estimates the shift b "as its expected post-activation
output at initialization"; Table 1's values are that expectation for Gaussian
pre-activations (``shift=theory``). For any other model (a conv autoencoder, a network on
standardised images) the pre-activations are not N(0, 1/3), and :func:`calibrate_shifts_`
measures the same expectation on data instead.

Example::

    model = ConvAutoencoder(1, [16, 64], 2, "relu:shift=measured")
    initialize_(model, "he")
    actlab.calibrate_shifts_(model, [x_train[:64], x_train[64:128]])
    model(x)                      # every ReLU now subtracts its own measured mean
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import Tensor, nn

from actlab.activations.spec_activation import SpecActivation

__all__ = ["ShiftRecorder", "calibrate_shifts_", "measured_activations"]


class _StopForward(Exception):
    """Ends the model's forward once the module being calibrated has seen its input."""


class ShiftRecorder:
    """Collects the unshifted output of the first uncalibrated ``shift=measured`` module that
    each calibration forward reaches (the one being calibrated), in float64."""

    def __init__(self) -> None:
        self.target: SpecActivation | None = None
        self.total: Tensor | None = None
        self.count = 0

    def stop(self, module: SpecActivation, y: Tensor) -> Exception:
        """Add ``y`` to the running sum and return the exception that ends the forward."""
        if self.target is None:
            self.target = module
        elif module is not self.target:
            raise RuntimeError(
                "calibrate_shifts_: the batches reach different shift=measured activations "
                f"first ({self.target.spec!r} and {module.spec!r}); the model's path must "
                "not depend on the batch"
            )
        part = y.detach().sum(dtype=torch.float64)
        self.total = part if self.total is None else self.total + part
        self.count += y.numel()
        return _StopForward()

    def mean(self) -> float:
        """The mean over every element recorded."""
        return float(self.total) / self.count if self.count and self.total is not None else math.nan


def measured_activations(model: nn.Module) -> dict[str, SpecActivation]:
    """``{name: module}`` of every ``shift=measured`` activation in ``model``."""
    return {
        name: m for name, m in model.named_modules() if isinstance(m, SpecActivation) and m.measured
    }


def _device(model: nn.Module) -> torch.device | None:
    for tensor in (*model.parameters(), *model.buffers()):
        return tensor.device
    return None


def _call(model: nn.Module, batch: Any, device: torch.device | None) -> None:
    """``model(batch)``, ``model(*batch)`` or ``model(**batch)``, tensors moved to ``device``."""

    def move(v: Any) -> Any:
        return v.to(device) if isinstance(v, Tensor) and device is not None else v

    if isinstance(batch, Mapping):
        model(**{k: move(v) for k, v in batch.items()})
    elif isinstance(batch, (tuple, list)):
        model(*(move(v) for v in batch))
    else:
        model(move(batch))


def calibrate_shifts_(model: nn.Module, batches: Iterable[Any]) -> dict[str, float]:
    """Set every ``shift=measured`` activation's shift to its mean output on ``batches``.

    Call it on the freshly initialised model: the shift is then the measured counterpart of
    the "expected post-activation output at initialization" ("Rethinking Activation
    Functions" §2.1). As there, the shift of a module is one scalar: the mean of its
    unshifted output (the function, then ``clip``) over every element of every batch
    (examples, features, channels and positions alike), weighted by element.

    The modules are calibrated one at a time in the order the forward reaches them, each
    with the earlier ones already shifted: one pass over ``batches`` per module, each forward
    stopped at the module being measured. So a module's shift is measured on the inputs it
    will see, not on those of a model whose earlier activations are still unshifted.

    ``batches`` is iterated once per module (it is read into a list first); each batch is
    what the model is called with: a tensor (``model(x)``), a tuple or list of positional
    arguments, or a dict of keyword arguments; tensors are moved to the model's device.
    Everything runs under ``torch.no_grad`` in the model's current train/eval mode (a
    ``noisy_relu`` in training mode includes its noise; BatchNorm in training mode uses batch
    statistics). The calibration leaves no other trace: every other buffer (running
    statistics, adaptive-shift state) and the global random generators are restored.
    Calling it again measures every such module afresh.

    Returns ``{module name: shift}`` in calibration order. Modules that no forward reached
    stay uncalibrated (a warning names them) and raise
    :class:`~actlab.errors.ShiftNotCalibratedError` if used. Raises ``ValueError`` for empty
    ``batches`` and ``RuntimeError`` for a non-finite mean or batches that reach different
    modules first.
    """
    modules = measured_activations(model)
    if not modules:
        return {}
    data = list(batches)
    if not data:
        raise ValueError("calibrate_shifts_: batches is empty; give at least one batch")
    names = {id(m): name for name, m in modules.items()}
    offsets = {id(m.offset) for m in modules.values()}
    saved = {name: b.detach().clone() for name, b in model.named_buffers() if id(b) not in offsets}
    device = _device(model)
    cuda = sorted(
        {
            t.device.index or 0
            for t in (*model.parameters(), *model.buffers())
            if t.device.type == "cuda"
        }
    )
    shifts: dict[str, float] = {}
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=cuda):
            for m in modules.values():  # measure afresh: every module starts uncalibrated
                m.offset.fill_(math.nan)
                m.refresh_from_buffers()
            while True:
                recorder = _measure_next(model, data, device, modules)
                if recorder.target is None:
                    break
                target, mean = recorder.target, recorder.mean()
                if names[id(target)] in shifts:  # would measure it forever
                    raise RuntimeError(
                        f"calibrate_shifts_: {names[id(target)]!r} still reads as "
                        f"uncalibrated after its shift was set"
                    )
                if not math.isfinite(mean):
                    raise RuntimeError(
                        f"calibrate_shifts_: the mean output of "
                        f"{names[id(target)]!r} ({target.spec}) is {mean}"
                    )
                target.offset.fill_(mean)
                target._recorder = None
                target.refresh_from_buffers()
                if target.offset.is_meta:  # no value to read back: shapes only, done
                    target._pending = False
                shifts[names[id(target)]] = float(target.offset)
    finally:
        for m in modules.values():
            m._recorder = None
        with torch.no_grad():
            for name, b in model.named_buffers():
                if name in saved:
                    b.copy_(saved[name])
    missed = [name for name, m in modules.items() if m.needs_calibration]
    if missed:
        warnings.warn(
            f"calibrate_shifts_: no forward on the batches reached {missed}; "
            "they stay uncalibrated",
            RuntimeWarning,
            stacklevel=2,
        )
    return shifts


def _measure_next(
    model: nn.Module,
    data: list[Any],
    device: torch.device | None,
    modules: dict[str, SpecActivation],
) -> ShiftRecorder:
    """One pass over ``data``: the first uncalibrated module reached, and its outputs."""
    recorder = ShiftRecorder()
    for m in modules.values():
        if m.needs_calibration:
            m._recorder = recorder
    for i, batch in enumerate(data):
        try:
            _call(model, batch, device)
        except _StopForward:
            continue
        if recorder.target is not None or i:
            raise RuntimeError(
                "calibrate_shifts_: some batches reach an uncalibrated "
                "shift=measured activation and others do not; the model's "
                "path must not depend on the batch"
            )
        break  # the whole forward ran: no uncalibrated module is on the path
    return recorder
