"""The module built from a spec: :class:`SpecActivation`, and the entry points that build it.

:func:`activation` builds the module of a spec string; :func:`make_activation` is the one
entry point every model uses for an activation site (a spec, a module or a factory).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, NoReturn

import torch
from torch import Tensor, nn

from actlab.activations.base import Activation, functorch_transforms_active
from actlab.activations.definitions import _REGISTRY
from actlab.activations.fused import fused_kernel, fused_shift_center
from actlab.activations.grammar import DEFAULT_Q, ParsedSpec, parse_spec
from actlab.activations.interop import as_actlab
from actlab.activations.registry import theory_shift
from actlab.activations.shift import AdaptiveCenter, feature_dim
from actlab.activations.sparse import channel_topk, topk_sparsify
from actlab.activations.special import LearnableSiLUCore
from actlab.activations.threshold import (
    TopKThreshold,
    fused_frozen_mask,
    fused_gaussian_mask,
    gaussian_mask,
    gaussian_shift,
)
from actlab.config import register_spec_kind
from actlab.errors import ShiftNotCalibratedError, SpecError


def _output_bounds(bounds: tuple[float, float] | None, clip: float | None, shift: float,
                   adaptive: bool, topk: float | None) -> tuple[float, float] | None:
    """Range of the module's outputs when the function's range is known (None otherwise)."""
    if bounds is None or adaptive:
        return None
    low, high = bounds
    if clip is not None:
        high = min(high, clip)
        low = min(low, clip)
    low, high = low - shift, high - shift
    if topk is not None:  # dropped entries are exactly 0
        low, high = min(low, 0.0), max(high, 0.0)
    return (low, high)


class SpecActivation(Activation):
    """The module built from a spec: the function, then clip, shift, adaptive and topk.

    Attributes: ``spec`` (canonical string), ``parsed`` (its :class:`ParsedSpec`),
    ``bounded`` (a saturating function), ``bounds`` (the output range ``(low, high)`` where
    known, else ``None``), ``clip``, ``shift`` (the constant subtracted, with
    ``shift=theory`` resolved at construction), ``center`` (an
    :class:`~actlab.activations.shift.AdaptiveCenter` or ``None``), ``topk``, ``topk_rule``
    (``"exact"``, ``"running"``, ``"gaussian"``, ``"gaussian_shift"``, ``"channel"`` (whole
    channels of (N, C, H, W) activations, :func:`~actlab.activations.sparse.channel_topk`) or
    ``None``) and
    ``topk_running`` (the :class:`~actlab.activations.threshold.TopKThreshold` of
    ``topk=K:freeze_after=N`` / ``momentum=m``, else ``None``).

    The shift is module state: the 0-dim buffer ``offset`` (float64 until the module is
    cast), which follows ``.to()`` and which every path reads (eager, torch.func transforms,
    the fused and native kernels). Every module has it, zero without a shift, so modules
    that differ only in their shift have the same structure and stack into one vmapped
    ensemble. It is not saved in ``state_dict`` (the spec determines it), except with
    ``shift=measured``: there ``offset`` is NaN until
    :func:`~actlab.activations.calibrate.calibrate_shifts_` measures it (``measured`` is
    true, ``needs_calibration`` says whether that is still to do, and ``forward`` raises
    :class:`ShiftNotCalibratedError` until then), and it is saved, so a checkpoint keeps
    the calibrated value.
    """

    offset: Tensor

    def __init__(self, parsed: ParsedSpec) -> None:
        super().__init__()
        defn = _REGISTRY[parsed.name]
        self.spec = parsed.canonical
        self.parsed = parsed
        self.bounded = defn.bounded
        params = parsed.params
        self.clip: float | None = parsed.options.get("clip")
        shift = parsed.options.get("shift")
        self.measured = shift == "measured"
        if shift == "theory":
            shift = theory_shift(parsed, parsed.options.get("q", DEFAULT_Q))
        shift = math.nan if self.measured else float(shift or 0.0)
        self.register_buffer("offset", torch.tensor(shift, dtype=torch.float64),
                             persistent=self.measured)
        # an actlab.activations.calibrate.ShiftRecorder while calibrating (not imported: the
        # calibrate module builds on this one)
        self._recorder: Any = None
        self._members_shifted = True  # torch.func paths subtract it (see for_members)
        self.topk: float | None = parsed.options.get("topk")
        adaptive = "adaptive" in parsed.flags
        momentum, freeze_after = parsed.options.get("momentum"), parsed.options.get("freeze_after")
        self.center = AdaptiveCenter(momentum, freeze_after) if adaptive else None
        # "exact", "running" (TopKThreshold), "gaussian", "gaussian_shift" or "channel"; None
        # without topk
        self.topk_rule: str | None = None
        self.topk_running: TopKThreshold | None = None
        if self.topk is not None:
            self.topk_rule = next((f for f in ("gaussian", "gaussian_shift", "channel")
                                   if f in parsed.flags), None)
            if self.topk_rule is None and (momentum is not None or freeze_after is not None):
                self.topk_rule = "running"
                self.topk_running = TopKThreshold(self.topk, momentum, freeze_after)
            self.topk_rule = self.topk_rule or "exact"
        self._read_offset(shift)
        self.core: nn.Module | None = None
        if parsed.name == "silu" and "learnable" in parsed.flags:
            self.core = LearnableSiLUCore(params["beta"])
        elif defn.core is not None:
            self.core = defn.core(**params)
        self._bind_kernels()

    @property
    def shift(self) -> float:
        """The constant subtracted after the function, as a float (read from ``offset``;
        NaN for a ``shift=measured`` module not calibrated yet)."""
        return float(self.offset)

    @property
    def needs_calibration(self) -> bool:
        """True for a ``shift=measured`` module whose shift has not been measured yet."""
        return self._pending

    def _read_offset(self, value: float) -> None:
        """Derive the Python-side choices from the shift ``value`` (the buffer's content)."""
        self._pending = self.measured and math.isnan(value)
        self._shifted = not self._pending and value != 0.0  # eager paths skip a zero shift
        adaptive = self.center is not None
        bounds = _REGISTRY[self.parsed.name].bounds
        if callable(bounds):  # a range that depends on the parameters (hardtanh)
            bounds = bounds(**self.parsed.params)
        self.bounds = None if self._pending else _output_bounds(
            bounds, self.clip, value, adaptive, self.topk)

    def _bind_kernels(self) -> None:
        """Choose the forward kernels (plain functions, not state: rebuilt on unpickling)."""
        parsed = self.parsed
        defn = _REGISTRY[parsed.name]
        params = parsed.params
        post_ops = self.clip is not None or self._shifted or self.center is not None
        self._fn: Callable[[Tensor], Tensor] | None = None
        if self.core is not None:
            self._inplace_ok = defn.inplace_ok or parsed.name == "silu"
        else:
            kernel = defn.fast or defn.fn
            self._inplace_ok = defn.inplace_ok
            if post_ops and defn.fast_inplace is not None:
                kernel, self._inplace_ok = defn.fast_inplace, True
            self._fn = partial(kernel, **params) if params else kernel
        # Out-of-place kernel for torch.func transforms (vmap, grad, jvp), where the custom
        # autograd nodes and in-place writes of the fast paths are not allowed.
        # The core's bound __call__, not the core itself: assigning the module would register
        # it a second time (as "_plain_fn"), doubling its entries in state_dict.
        plain = self.core.__call__ if self.core is not None else (defn.fast or defn.fn)
        self._plain_fn = partial(plain, **params) if params and self.core is None else plain
        if self.clip is not None:
            self._inplace_ok = True  # clamp_max returns a fresh tensor it does not save
        # Fast path: one autograd node for function + shift/centring (see fused.py).
        plain_center = self.center is not None and self.center.momentum is None \
            and self.center.freeze_after is None
        self._fused = None
        if self.core is None and self.clip is None and (
            plain_center or (self.center is None and self._shifted)
        ):
            self._fused = fused_kernel(parsed.name, params)
        # Threshold Top-K fused with the function (one node, no extra allocation) when no
        # other option sits between them.
        self._mask_kernel = None
        if self.topk_rule in ("running", "gaussian") and self.core is None and \
                self.clip is None and not self._shifted and self.center is None:
            self._mask_kernel = fused_kernel(parsed.name, params)

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__() if hasattr(super(), "__getstate__") else self.__dict__
        state = dict(state)
        state.pop("_fn", None)
        state.pop("_fused", None)
        state.pop("_mask_kernel", None)
        state.pop("_plain_fn", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        old_shift = state.pop("shift", None)  # modules pickled when the shift was a float
        state.setdefault("_members_shifted", True)
        for key, default in (("measured", False), ("_pending", False), ("_recorder", None)):
            state.setdefault(key, default)
        if "topk_rule" not in state:  # modules pickled before the threshold rules
            state["topk_rule"] = None if state.get("topk") is None else "exact"
            if "topk_running" not in state.get("_modules", {}):
                state["topk_running"] = None
        super().__setstate__(state)
        self._modules.pop("_plain_fn", None)  # modules pickled when the core was listed twice
        if "offset" not in self._buffers:
            shift = float(old_shift or 0.0)
            self.register_buffer("offset", torch.tensor(shift, dtype=torch.float64),
                                 persistent=False)
            self._shifted = shift != 0.0
        self._bind_kernels()

    def forward(self, x: Tensor) -> Tensor:
        """Apply the activation and its options."""
        if self._pending:
            self._measure(x)
        if functorch_transforms_active():
            return self._forward_out_of_place(x)
        if self._mask_kernel is not None:
            if self.topk_rule == "gaussian" and self.topk < 1.0:
                return fused_gaussian_mask(x, self._mask_kernel, self.topk)
            running = self.topk_running
            if running is not None and running.uses_threshold():
                return fused_frozen_mask(x, self._mask_kernel, running.threshold)
        if self.topk_rule == "gaussian_shift":
            x = gaussian_shift(x, self.topk)
        if self._fused is not None:
            dim = feature_dim(x) if self.center is not None else None
            y = fused_shift_center(x, self._fused, self.offset, dim)
        else:
            y = self.core(x) if self.core is not None else self._fn(x)
            if self.clip is not None:
                y = torch.clamp_max(y, self.clip)
            if self._shifted:
                y = y.sub_(self.offset) if self._inplace_ok else y - self.offset
            if self.center is not None:
                y = self.center(y, inplace=self._inplace_ok or self._shifted)
        return self._sparsify(y)

    def _sparsify(self, y: Tensor) -> Tensor:
        """The output-side Top-K of ``topk`` (``gaussian_shift`` acts on the input instead)."""
        if self.topk_rule in (None, "gaussian_shift"):
            return y
        if self.topk_running is not None:
            return self.topk_running(y)
        if self.topk_rule == "gaussian":
            return gaussian_mask(y, self.topk)
        if self.topk_rule == "channel":
            return channel_topk(y, self.topk, what=repr(self.spec))
        return topk_sparsify(y, self.topk)

    def _measure(self, x: Tensor) -> NoReturn:
        """The forward of a ``shift=measured`` module before calibration: hand the unshifted
        output (function, then clip) to the recorder calibrating it, which stops the model's
        forward there; without one, raise :class:`ShiftNotCalibratedError`."""
        if self._recorder is None:
            raise ShiftNotCalibratedError(
                f"activation {self.spec!r}: the shift is not measured yet; call "
                "actlab.calibrate_shifts_(model, batches) on the initialised model (or load a "
                "state_dict saved after calibration) before using it")
        y = self.core(x) if self.core is not None else self._plain_fn(x)
        if self.clip is not None:
            y = torch.clamp_max(y, self.clip)
        raise self._recorder.stop(self, y)

    def refresh_from_buffers(self) -> None:
        """Re-derive what construction decided from ``offset`` (whether the eager paths
        subtract a shift, which kernels run, whether a measured shift is still to measure)
        after its value was written in place, as
        :meth:`actlab.train.ensemble.Ensemble.member` does when it copies a member's state
        into another member's module, and as loading a ``state_dict`` does."""
        if self.topk_running is not None:
            self.topk_running.refresh_from_buffers()
        if self.offset.is_meta:
            return
        self._read_offset(float(self.offset))
        self._bind_kernels()

    def restore_shift_(self) -> None:
        """Write the shift the spec determines (0, the number, the theory value) into
        ``offset`` again, then re-derive what depends on it; a ``shift=measured`` module
        keeps its value (saved state, loaded with the rest). For loaders that materialise
        the buffers a checkpoint does not hold without their values, as transformers'
        ``from_pretrained`` does (:mod:`actlab.integrations.hidden_act` calls it there)."""
        if self.measured or self.offset.is_meta:
            return
        shift = self.parsed.options.get("shift")
        if shift == "theory":
            shift = theory_shift(self.parsed, self.parsed.options.get("q", DEFAULT_Q))
        with torch.no_grad():
            self.offset.fill_(float(shift or 0.0))
        self.refresh_from_buffers()

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str,
                              *args: Any, **kwargs: Any) -> None:
        """Load as usual, then re-read ``offset`` (a measured shift comes with the state).

        State dicts saved when the core was also listed as ``_plain_fn`` hold its tensors
        twice; that copy is dropped (the ``core.`` entries load)."""
        for key in [k for k in state_dict if k.startswith(prefix + "_plain_fn.")]:
            del state_dict[key]
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        self.refresh_from_buffers()

    def for_members(self, members: Sequence[nn.Module]) -> None:
        """Serve as the shared skeleton of ``members`` in a vmapped ensemble.

        Under torch.func the members share this module's code but each brings its own
        ``offset``, so the shift is subtracted whatever this module's own value; when no
        member has a shift, the skeleton may skip it (as eager does). Called by
        :class:`~actlab.train.ensemble.Ensemble` on its template. A ``shift=measured``
        member not calibrated yet makes the skeleton raise as that member would.
        """
        self._members_shifted = any(getattr(m, "_shifted", True) for m in members)
        self._pending = any(getattr(m, "_pending", False) for m in members)

    def _forward_out_of_place(self, x: Tensor) -> Tensor:
        """The same function with plain out-of-place ops, so torch.func can transform it."""
        if self.topk_rule == "gaussian_shift":
            x = gaussian_shift(x, self.topk)
        y = self._plain_fn(x)
        if self.clip is not None:
            y = torch.clamp_max(y, self.clip)
        if self._members_shifted:
            y = y - self.offset
        if self.center is not None:
            y = self.center(y, inplace=False)
        return self._sparsify(y)


def activation(spec: str | nn.Module | type[nn.Module]) -> Activation:
    """Build the module for ``spec``, e.g. ``activation("gelu:adaptive")``.

    ``spec`` is a spec string (names of torch, timm and transformers included:
    ``"gelu_pytorch_tanh"``, ``"quick_gelu"``, ``"hard_swish"``), or an activation module or
    class of actlab, ``torch.nn``, transformers or timm (``nn.GELU``, ``nn.GELU()``,
    ``nn.LeakyReLU(0.2)``): the actlab module computing the same function
    (:func:`~actlab.activations.interop.spec_of`); an actlab module is copied with its state.

    Raises :class:`~actlab.errors.SpecError` (a ``ValueError``) for unknown names or
    options (naming the closest valid ones), out-of-range values (naming the option) and
    modules that have no spec.
    """
    if isinstance(spec, nn.Module | type):
        return as_actlab(spec, activation)
    return SpecActivation(parse_spec(spec))


def make_activation(spec: str | nn.Module | Callable[[], nn.Module]) -> nn.Module:
    """The activation module for one site of a model: the one entry point every model uses.

    ``spec`` is a spec string (a new module from :func:`activation`), an ``nn.Module`` or a
    zero-argument factory (its result). A module passed in is always deep-copied, once per
    call and so once per site: two layers never share one stateful activation (learnable
    parameters, an adaptive shift's running mean), and the module passed in stays unused.

    Raises :class:`~actlab.errors.SpecError` for an invalid spec or a value of another type,
    ``TypeError`` when a factory returns something other than an ``nn.Module``.
    """
    if isinstance(spec, nn.Module):
        return copy.deepcopy(spec)
    if isinstance(spec, str):
        return activation(spec)
    if callable(spec):
        module = spec()
        if not isinstance(module, nn.Module):
            raise TypeError(f"activation factory returned {type(module).__name__}, not an nn.Module")
        return module
    raise SpecError(f"activation: expected a spec string, an nn.Module or a factory, got {spec!r}")


# Config fields declared with checked(spec="activation") are checked by building the module.
register_spec_kind("activation", activation)
