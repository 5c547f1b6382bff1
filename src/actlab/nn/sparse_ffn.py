"""Sparse FFN inference: an FFN that reads only the weights its non-zero inputs need.

Decoding a token through an FFN reads every weight once; an input entry that is zero needs
none of its column of the weight. Two forms of sparsity, chosen by the arguments of
:func:`sparse_inference` (and :func:`sparse_ffn`):

* **activation form** (the default; for ReLU-family models): many entries of the hidden
  ``h = act(up(x))`` are exactly zero. The down projection multiplies only the neurons active
  for at least one token of the forward (their union); a gated FFN computes the gate in full
  and the up projection only for the neurons whose gate is non-zero. Exact: outputs equal
  the dense forward up to float summation order.
* **TEAL form** (``sparsity=`` with ``calibration=`` batches, or ``thresholds=``): the entries
  of the FFN input and of the down projection's input whose magnitude is at most a per-layer
  threshold are set to zero (:func:`~actlab.nn.sparse_calibration.calibrate_thresholds`
  calibrates it for a target sparsity), and every projection reads only the rows of its
  active inputs. Any activation; it changes the output (its quality cost is measured in
  ``benchmarks/sparse_decode.py``).

For a gated FFN whose three matrices are equal in bytes, the activation form (gate read in
full) cannot beat ``1 / (1/3 + 2 (1 - s) / 3)`` at activation sparsity ``s``, the TEAL form
``1 / (1 - s)``.

Methods (``method=``):

* ``"kernel"``: the C++ sparse decode kernel (:mod:`actlab.nn.sparse_kernel`), which streams
  only the active rows of input-major weight copies and runs dense below its break-even
  sparsity;
* ``"union"``: PyTorch; one gather of the union's rows of the transposed weight and one
  matrix product; the union grows with the number of tokens, so the saving shrinks with it;
* ``"per_token"`` (activation form only): PyTorch; each token sums only its own active rows
  of ``W_down^T`` (one ``embedding_bag`` with per-entry weights);
* ``"auto"`` (default): ``"kernel"`` where it is built (a C++ compiler is present) and the
  tensors suit it (CPU, float32/bfloat16), else ``"union"``.

::

    from actlab.nn.sparse_ffn import sparse_inference

    model.eval()
    with torch.no_grad(), sparse_inference(model):                 # ReLU model, exact
        out = model(idx)
    with torch.no_grad(), sparse_inference(model, sparsity=0.5, calibration=batches):
        out = model(idx)                                          # TEAL, 50 % of entries zero

The name ``sparse_ffn`` follows the issue; since it is also this module's name, ``actlab.nn``
exports only ``sparse_down`` and ``sparse_inference`` (``actlab.nn.sparse_ffn`` is the
module). On the CPU the PyTorch methods find the active set with NumPy, whose column
reduction is several times faster than ``torch.any(0)`` on one thread. Inference only: the
swapped forwards refuse to run in training mode or with gradients enabled, because the
gathered weights would need their own backward (and dropout would be skipped silently).
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from actlab.errors import did_you_mean
from actlab.nn import sparse_kernel
from actlab.nn.ffn import FFN, GatedFFN
from actlab.nn.sparse_calibration import SiteThresholds, calibrate_thresholds, ffn_sites
from actlab.nn.sparse_kernel import (
    active_inputs,
    gather_linear,
    masked,
    sparse_linear,
    sparse_linears,
    sparse_rows,
)

__all__ = ["METHODS", "active_union", "sparse_down", "sparse_ffn", "sparse_inference"]

METHODS = ("auto", "kernel", "union", "per_token")
_CACHE_ATTR = "_sparse_ffn_t"


def active_union(h: Tensor) -> Tensor:
    """Indices (1-d, ascending, int64) of the hidden neurons non-zero for at least one token
    of ``h`` (shape (..., m))."""
    flat = h.reshape(-1, h.shape[-1])
    if _numpy_ok(flat):
        # a column reduction in NumPy is 2-9x faster than torch's any(0) on one CPU thread
        return torch.from_numpy(np.flatnonzero(flat.detach().numpy().any(0)))
    return flat.any(0).nonzero().squeeze(1)


def _bags(flat: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``(cols, offsets, values)`` of the non-zero entries of a 2-d tensor, row by row, as
    ``F.embedding_bag`` takes them (one bag per row)."""
    if _numpy_ok(flat):
        a = flat.detach().numpy()
        rows, cols = np.nonzero(a)
        offsets = np.zeros(a.shape[0], dtype=np.int64)
        np.cumsum(np.count_nonzero(a, axis=1)[:-1], out=offsets[1:])
        return (torch.from_numpy(cols), torch.from_numpy(offsets), torch.from_numpy(a[rows, cols]))
    rows, cols = flat.nonzero(as_tuple=True)
    offsets = torch.zeros(flat.shape[0], dtype=torch.long, device=flat.device)
    if flat.shape[0] > 1:
        offsets[1:] = torch.bincount(rows, minlength=flat.shape[0])[:-1].cumsum(0)
    return cols, offsets, flat[rows, cols]


def _numpy_ok(t: Tensor) -> bool:
    return t.device.type == "cpu" and t.dtype in (torch.float32, torch.float64, torch.float16)


def sparse_down(
    h: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    *,
    weight_t: Tensor | None = None,
    method: str = "auto",
    threshold: float = 0.0,
) -> Tensor:
    """``F.linear(h, weight, bias)`` computed only with the neurons where ``h`` is non-zero
    (with ``threshold``: where ``|h| > threshold``, the others counted as zero).

    Args:
        h: hidden activations, shape (..., m).
        weight: the down-projection's weight in ``nn.Linear`` layout (d, m).
        bias: its bias (d,) or ``None``.
        weight_t: ``weight.t().contiguous()`` (m, d), if the caller keeps one: a row gather of
            it is contiguous, a column gather of ``weight`` is strided; the kernel needs it
            (made here, a full copy, when not given).
        method: one of :data:`METHODS` (see the module docstring).
        threshold: TEAL's magnitude threshold (0: the activation's own zeros).
    """
    _check_method(method)
    if _kernel_applies(method, h, weight):
        table = weight_t if weight_t is not None else weight.t().contiguous()
        return sparse_linear(h, table, bias, threshold=threshold, weight=weight,
                             backend="kernel")
    method = "union" if method in ("auto", "kernel") else method
    h = masked(h, threshold)
    lead, m = h.shape[:-1], h.shape[-1]
    flat = h.reshape(-1, m)
    d = weight.shape[0]
    if method == "union":
        idx = active_union(flat)
        w_t = (
            weight_t.index_select(0, idx)
            if weight_t is not None
            else weight.index_select(1, idx).t()
        )
        if bias is not None:
            return torch.addmm(bias, flat.index_select(1, idx), w_t).reshape(*lead, d)
        return (flat.index_select(1, idx) @ w_t).reshape(*lead, d)
    table = weight_t if weight_t is not None else weight.t().contiguous()
    if flat.shape[0] == 1:  # one token: its active set is the union (cheaper to find)
        cols = active_union(flat)
        offsets, values = torch.zeros(1, dtype=torch.long, device=h.device), flat[0, cols]
    else:
        cols, offsets, values = _bags(flat)
    out = F.embedding_bag(cols, table, offsets, mode="sum", per_sample_weights=values)
    if bias is not None:
        out = out + bias
    return out.reshape(*lead, d)


def sparse_ffn(
    ffn: FFN | GatedFFN,
    x: Tensor,
    *,
    method: str = "auto",
    down_t: Tensor | None = None,
    thresholds: SiteThresholds | None = None,
    up_t: Tensor | None = None,
    gate_t: Tensor | None = None,
) -> Tensor:
    """Forward of an actlab :class:`~actlab.nn.ffn.FFN` or :class:`~actlab.nn.ffn.GatedFFN`
    on ``x`` (..., d) that reads only the weights its non-zero inputs need.

    Without ``thresholds``, the activation form: plain, ``h = act(norm(up(x)))`` in full, then
    :func:`sparse_down`; gated, the gate ``act(gate_proj(x))`` in full and ``up`` only for the
    union of neurons whose gate is non-zero (``"per_token"`` computes ``up`` in full). With
    ``thresholds`` (:class:`~actlab.nn.sparse_calibration.SiteThresholds`), the TEAL form: the
    FFN input's entries ``|x| <= thresholds.ffn_input`` and the down input's entries
    ``|h| <= thresholds.down_input`` count as zero, and every projection reads only the rows
    of the active inputs. ``down_t``, ``up_t``, ``gate_t``: optional cached transposed weights
    (``ffn.down.weight.t().contiguous()`` ...; made here when needed and not given).
    Inference only (see :func:`sparse_inference`).
    """
    _check_method(method)
    if not isinstance(ffn, (FFN, GatedFFN)):
        raise TypeError(f"sparse_ffn needs an actlab FFN or GatedFFN, got {type(ffn).__name__}")
    _check_inference(ffn)
    if thresholds is not None:
        return _teal_ffn(ffn, x, thresholds, method, down_t, up_t, gate_t)
    down = ffn.down
    if not isinstance(ffn, GatedFFN):
        h = ffn.act(ffn.norm(ffn.up(x)))
        return sparse_down(h, down.weight, down.bias, weight_t=down_t, method=method)
    gate = ffn.act(ffn.gate_proj(x))
    if method == "per_token":
        h = gate * ffn.up(x)
        return sparse_down(h, down.weight, down.bias, weight_t=down_t, method=method)
    lead, m = gate.shape[:-1], gate.shape[-1]
    flat_gate = gate.reshape(-1, m)
    flat_x = x.reshape(-1, x.shape[-1])
    if _kernel_applies(method, flat_gate, down.weight):
        idx, gc = active_inputs(flat_gate, backend="kernel")
        limit = sparse_kernel.dense_above(down.weight.dtype, flat_gate.shape[0])
        if idx.numel() > limit * m and gate.dtype == down.weight.dtype:
            return down(gate * ffn.up(x))  # below the break-even sparsity
        table = down_t if down_t is not None else down.weight.t().contiguous()
        h = gc * sparse_rows(flat_x, ffn.up.weight, idx, ffn.up.bias, backend="kernel")
        out = gather_linear(h, idx, table, down.bias, backend="kernel")
        return out.reshape(*lead, down.out_features)
    idx = active_union(flat_gate)
    up_w = ffn.up.weight.index_select(0, idx)
    up_b = None if ffn.up.bias is None else ffn.up.bias.index_select(0, idx)
    h = flat_gate.index_select(1, idx) * F.linear(flat_x, up_w, up_b)
    w_t = (
        down_t.index_select(0, idx)
        if down_t is not None
        else down.weight.index_select(1, idx).t()
    )
    out = h @ w_t
    if down.bias is not None:
        out = out + down.bias
    return out.reshape(*lead, down.out_features)


def _teal_ffn(ffn: FFN | GatedFFN, x: Tensor, thresholds: SiteThresholds, method: str,
              down_t: Tensor | None, up_t: Tensor | None, gate_t: Tensor | None) -> Tensor:
    """The TEAL form of :func:`sparse_ffn`."""
    if method == "per_token":
        raise ValueError("method 'per_token' is the activation form's; the TEAL form "
                         "(thresholds=) runs 'auto', 'kernel' or 'union'")
    backend = "kernel" if _kernel_applies(method, x, ffn.up.weight) else "torch"
    up_t = up_t if up_t is not None else ffn.up.weight.t().contiguous()
    down_t = down_t if down_t is not None else ffn.down.weight.t().contiguous()
    if isinstance(ffn, GatedFFN):
        gate_t = gate_t if gate_t is not None else ffn.gate_proj.weight.t().contiguous()
        g, u = sparse_linears(x, [(gate_t, ffn.gate_proj.weight, ffn.gate_proj.bias),
                                  (up_t, ffn.up.weight, ffn.up.bias)],
                              threshold=thresholds.ffn_input, backend=backend)
        h = ffn.act(g) * u
    elif backend == "kernel" and method == "auto":  # "auto" checked the tensors: lean path
        h = ffn.act(ffn.norm(sparse_kernel.project(x, up_t, ffn.up.weight, ffn.up.bias,
                                                   thresholds.ffn_input)))
        return sparse_kernel.project(h, down_t, ffn.down.weight, ffn.down.bias,
                                     thresholds.down_input)
    else:
        u = sparse_linear(x, up_t, ffn.up.bias, threshold=thresholds.ffn_input,
                          weight=ffn.up.weight, backend=backend)
        h = ffn.act(ffn.norm(u))
    return sparse_linear(h, down_t, ffn.down.bias, threshold=thresholds.down_input,
                         weight=ffn.down.weight, backend=backend)


def _kernel_applies(method: str, x: Tensor, weight: Tensor) -> bool:
    """Whether ``method`` runs the C++ kernel on these tensors (``"kernel"``: always, and the
    kernel functions raise if it cannot; ``"auto"``: where it is built and fits)."""
    if method == "kernel":
        return True
    return (method == "auto" and x.is_cpu  # not x.device: a new object per call
            and x.dtype in (torch.float32, torch.bfloat16)
            and weight.dtype in (torch.float32, torch.bfloat16) and sparse_kernel.available())


class _TransposeCache:
    """``weight.t().contiguous()``, recomputed only when the weight changes (in-place edits
    bump ``_version``; a new tensor changes ``data_ptr``)."""

    def __init__(self) -> None:
        self.key: tuple[int, int] | None = None
        self.value: Tensor | None = None

    def get(self, w: Tensor) -> Tensor:
        key = (w.data_ptr(), w._version)
        if key != self.key or self.value is None:
            self.value = w.detach().t().contiguous()
            self.key = key
        return self.value


@contextlib.contextmanager
def sparse_inference(
    model: nn.Module,
    *,
    method: str = "auto",
    sparsity: float | None = None,
    calibration: Iterable[Any] | None = None,
    thresholds: dict[str, SiteThresholds] | None = None,
) -> Iterator[list[str]]:
    """Within the block, the model's FFNs run sparse; yields the names of the swapped modules.

    Swapped: every actlab :class:`~actlab.nn.ffn.FFN` / :class:`~actlab.nn.ffn.GatedFFN`
    (whole forward, :func:`sparse_ffn`); in a Hugging Face model the projections of each MLP
    (:func:`~actlab.nn.sparse_calibration.ffn_sites`): the down projection (activation form),
    or its input projections and the down projection (TEAL form).

    Args:
        method: one of :data:`METHODS` (see the module docstring).
        sparsity: TEAL form: the share of FFN-input and down-input entries to zero, with
            thresholds calibrated per layer on ``calibration`` (inputs of ``model``, see
            :func:`~actlab.nn.sparse_calibration.run_batch`; a few batches suffice).
        thresholds: TEAL form with thresholds already calibrated
            (:func:`~actlab.nn.sparse_calibration.calibrate_thresholds`), by FFN name.

    Without ``sparsity`` and ``thresholds``, the activation form (exact). The original
    forwards come back on exit, also after an error. The transposed weights a swap uses are
    cached on its module (recomputed when the weight changes) and kept after exit, so a second
    context does not copy them again; ``del module._sparse_ffn_t`` frees them.

    Raises RuntimeError when the model is in training mode (here, and in any swapped forward
    that runs with gradients enabled or in training mode), ValueError when nothing was found
    or the sparsity arguments do not fit together.
    """
    _check_method(method)
    if model.training:
        raise RuntimeError(
            "sparse_inference is inference-only: call model.eval() first "
            "(and run under torch.no_grad() or torch.inference_mode())"
        )
    if sparsity is not None:
        if thresholds is not None:
            raise ValueError("give sparsity= (with calibration=) or thresholds=, not both")
        if calibration is None:
            raise ValueError("sparsity= needs calibration= batches to set the thresholds on")
        thresholds = calibrate_thresholds(model, calibration, sparsity)
    elif calibration is not None:
        raise ValueError("calibration= is used with sparsity=; give the target sparsity too")
    if thresholds is not None and method == "per_token":
        raise ValueError("method 'per_token' is the activation form's; the TEAL form "
                         "(sparsity=, thresholds=) runs 'auto', 'kernel' or 'union'")
    sites = ffn_sites(model)
    if thresholds is not None:
        missing = [site.name for site in sites if site.name not in thresholds]
        if missing:
            hint = did_you_mean(missing[0], thresholds, quote=True, prefix="; ")
            raise ValueError(f"no thresholds for the FFN {missing[0]!r}{hint} "
                             "(calibrate them on this model with calibrate_thresholds)")
    named = dict(model.named_modules())
    patched: list[tuple[nn.Module, Any]] = []
    names: list[str] = []
    for site in sites:
        limits = None if thresholds is None else thresholds[site.name]
        if site.module is not None:
            _swap(site.module, _ffn_forward(method, limits), patched)
            names.append(site.name)
            continue
        swaps = [(site.down, 0.0 if limits is None else limits.down_input)]
        if limits is not None:
            swaps = [(name, limits.ffn_input) for name in site.inputs] + swaps
        for name, threshold in swaps:
            if _dense_weights(named[name]) is not None:
                _swap(named[name], _dense_forward(method, threshold), patched)
                names.append(name)
    if not names:
        _restore(patched)
        raise ValueError(
            f"sparse_inference found no FFN to swap in {type(model).__name__} "
            "(needs actlab FFN/GatedFFN modules or a Hugging Face MLP)"
        )
    try:
        yield names
    finally:
        _restore(patched)


def _ffn_forward(method: str, limits: SiteThresholds | None) -> Any:
    """The swapped forward of an actlab FFN: :func:`sparse_ffn` with its cached transposes."""

    def forward(self: FFN | GatedFFN, x: Tensor) -> Tensor:
        caches = _caches(self)
        down_t = caches.transposed("down", self.down.weight)
        if limits is None:
            return sparse_ffn(self, x, method=method, down_t=down_t)
        # the TEAL form straight to its body: method and module type were checked on entry,
        # and on small layers every call's Python work counts against the skipped rows
        _check_inference(self)
        gate_t = (caches.transposed("gate_proj", self.gate_proj.weight)
                  if isinstance(self, GatedFFN) else None)
        return _teal_ffn(self, x, limits, method, down_t,
                         caches.transposed("up", self.up.weight), gate_t)

    return forward


def _dense_weights(module: nn.Module) -> tuple[Tensor | None, Tensor] | None:
    """``(W, W^T)`` of an ``nn.Linear`` (``W^T`` cached) or of transformers' ``Conv1D``, whose
    weight is already input-major (``W`` then ``None``: the dense product is its own);
    ``None`` for anything else."""
    if isinstance(module, nn.Linear):
        return module.weight, _caches(module).transposed("weight", module.weight)
    if type(module).__name__ == "Conv1D" and getattr(module, "weight", None) is not None:
        return None, module.weight.contiguous()
    return None


def _dense_forward(method: str, threshold: float) -> Any:
    """The swapped forward of a Hugging Face projection: reads only its active inputs' rows."""

    def forward(self: nn.Module, x: Tensor) -> Tensor:
        _check_inference(self)
        weight, weight_t = _dense_weights(self)  # type: ignore[misc]
        if weight is None:  # Conv1D: x @ weight + bias
            backend = "kernel" if _kernel_applies(method, x, weight_t) else "torch"
            return sparse_linear(x, weight_t, self.bias, threshold=threshold, backend=backend)
        return sparse_down(x, weight, self.bias, weight_t=weight_t, method=method,
                           threshold=threshold)

    return forward


class _Caches:
    """A module's transposed weights by name, each recomputed only when its weight changes."""

    def __init__(self) -> None:
        self.by_name: dict[str, _TransposeCache] = {}

    def transposed(self, name: str, weight: Tensor) -> Tensor:
        cache = self.by_name.get(name)  # not setdefault: no new cache object per call
        if cache is None:
            cache = self.by_name[name] = _TransposeCache()
        return cache.get(weight)


def _caches(module: nn.Module) -> _Caches:
    """The module's transposed-weight caches; kept on the module so that later contexts reuse
    them (one extra copy of each transposed weight's memory)."""
    caches = module.__dict__.get(_CACHE_ATTR)
    if caches is None:
        caches = _Caches()
        module.__dict__[_CACHE_ATTR] = caches
    return caches


def _swap(module: nn.Module, forward: Any, patched: list[tuple[nn.Module, str]]) -> None:
    """Bind ``forward`` as the instance's forward; remember it for :func:`_restore`."""
    had = "forward" in module.__dict__
    patched.append((module, module.__dict__["forward"] if had else None))
    module.forward = types.MethodType(forward, module)


def _restore(patched: list[tuple[nn.Module, Any]]) -> None:
    for module, old in reversed(patched):
        if old is None:
            del module.forward
        else:
            module.forward = old
    patched.clear()


def _check_method(method: str) -> None:
    if method not in METHODS:
        hint = did_you_mean(method, METHODS, quote=True, prefix="; ")
        raise ValueError(f"unknown sparse FFN method {method!r}{hint} "
                         f"(valid: {', '.join(METHODS)})")


def _check_inference(module: nn.Module) -> None:
    """Refuse training: no backward through the gather, and dropout would be skipped."""
    if module.training or torch.is_grad_enabled():
        raise RuntimeError(
            f"sparse FFN forward of {type(module).__name__} is inference-only: call "
            "model.eval() and run under torch.no_grad() or torch.inference_mode() "
            f"(training={module.training}, grad enabled={torch.is_grad_enabled()})"
        )
