"""Sparse FFN inference: skip the down-projection's inactive neurons.

After a ReLU-family activation many entries of the FFN's hidden ``h = act(x W_up^T + b)`` are
exactly zero, and a zero entry contributes nothing to ``h W_down^T``. :func:`sparse_down`
finds the neurons active (``h != 0``) for at least one token of the forward (their union),
gathers those columns of ``W_down`` (rows of its transpose) and multiplies only with them;
:func:`sparse_ffn` runs a whole :class:`~actlab.nn.ffn.FFN` or
:class:`~actlab.nn.ffn.GatedFFN` that way (a gated one also skips the rows of the up
projection whose gate is zero); :func:`sparse_inference` swaps these forwards into a model::

    from actlab.nn.sparse_ffn import sparse_inference

    model.eval()
    with torch.no_grad(), sparse_inference(model):   # actlab GPT or a ReLUfied BERT/MiniLM
        out = model(idx)

Two methods (``method=``):

* ``"union"`` (default): one gather of the union's rows of ``W_down^T`` and one matrix
  product; the union grows with the number of tokens, so the saving shrinks with it.
* ``"per_token"``: each token sums only its own active rows of ``W_down^T`` (one
  ``embedding_bag`` with per-entry weights); no union, but no matrix-product reuse either.

The name ``sparse_ffn`` follows the issue; since it is also this module's name, ``actlab.nn``
exports only ``sparse_down`` and ``sparse_inference`` (``actlab.nn.sparse_ffn`` is the
module). On the CPU the active set is found with NumPy, whose column reduction is several
times faster than ``torch.any(0)`` on one thread. Outputs equal the dense forward up to float
summation order (a zero entry times a finite weight is an exact zero). Inference only: the
swapped forwards refuse to run in training mode or with gradients enabled, because the
gathered weights would need their own backward (and dropout would be skipped silently).
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from actlab.nn.ffn import FFN, GatedFFN

__all__ = ["METHODS", "active_union", "sparse_down", "sparse_ffn", "sparse_inference"]

METHODS = ("union", "per_token")
_CACHE_ATTR = "_sparse_ffn_down_t"


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
    method: str = "union",
) -> Tensor:
    """``F.linear(h, weight, bias)`` computed only with the neurons where ``h`` is non-zero.

    Args:
        h: hidden activations, shape (..., m).
        weight: the down-projection's weight in ``nn.Linear`` layout (d, m).
        bias: its bias (d,) or ``None``.
        weight_t: ``weight.t().contiguous()`` (m, d), if the caller keeps one: a row gather of
            it is contiguous, a column gather of ``weight`` is strided.
        method: ``"union"`` or ``"per_token"`` (see the module docstring).
    """
    _check_method(method)
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
    ffn: FFN | GatedFFN, x: Tensor, *, method: str = "union", down_t: Tensor | None = None
) -> Tensor:
    """Forward of an actlab :class:`~actlab.nn.ffn.FFN` or :class:`~actlab.nn.ffn.GatedFFN`
    on ``x`` (..., d) that skips inactive neurons of the down-projection.

    Plain: ``h = act(norm(up(x)))``, then :func:`sparse_down`. Gated: the gate ``act(gate_proj(x))``
    is computed in full; ``up`` only for the union of neurons whose gate is non-zero (the
    product is zero elsewhere), so the up projection is skipped there too (``"union"``; the
    ``"per_token"`` method computes ``up`` in full). ``down_t`` is an optional cached
    ``ffn.down.weight.t().contiguous()``. Inference only (see :func:`sparse_inference`).
    """
    _check_method(method)
    if not isinstance(ffn, (FFN, GatedFFN)):
        raise TypeError(f"sparse_ffn needs an actlab FFN or GatedFFN, got {type(ffn).__name__}")
    _check_inference(ffn)
    down = ffn.down
    if isinstance(ffn, GatedFFN):
        gate = ffn.act(ffn.gate_proj(x))
        if method == "per_token":
            h = gate * ffn.up(x)
            return sparse_down(h, down.weight, down.bias, weight_t=down_t, method=method)
        lead, m = gate.shape[:-1], gate.shape[-1]
        flat_gate = gate.reshape(-1, m)
        idx = active_union(flat_gate)
        up_w = ffn.up.weight.index_select(0, idx)
        up_b = None if ffn.up.bias is None else ffn.up.bias.index_select(0, idx)
        h = flat_gate.index_select(1, idx) * F.linear(x.reshape(-1, x.shape[-1]), up_w, up_b)
        w_t = (
            down_t.index_select(0, idx)
            if down_t is not None
            else down.weight.index_select(1, idx).t()
        )
        out = h @ w_t
        if down.bias is not None:
            out = out + down.bias
        return out.reshape(*lead, down.out_features)
    h = ffn.act(ffn.norm(ffn.up(x)))
    return sparse_down(h, down.weight, down.bias, weight_t=down_t, method=method)


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
def sparse_inference(model: nn.Module, *, method: str = "union") -> Iterator[list[str]]:
    """Within the block, the model's FFNs run sparse; yields the names of the swapped modules.

    Swapped: every actlab :class:`~actlab.nn.ffn.FFN` / :class:`~actlab.nn.ffn.GatedFFN`
    (whole forward, :func:`sparse_ffn`); in a Hugging Face model (a ReLUfied MiniLM/BERT,
    see :func:`actlab.surgery.relufy_`) the down-projection ``nn.Linear`` of each MLP site
    (:func:`actlab.layout.mlp_layout`), whose input is the activation's output. The original
    forwards come back on exit, also after an error. The transposed down weight each swap
    uses is cached on its module (recomputed when the weight changes) and kept after exit, so
    a second context does not copy it again; ``del module._sparse_ffn_down_t`` frees it.

    Raises RuntimeError when the model is in training mode (here, and in any swapped forward
    that runs with gradients enabled or in training mode), ValueError when nothing was found.
    """
    _check_method(method)
    if model.training:
        raise RuntimeError(
            "sparse_inference is inference-only: call model.eval() first "
            "(and run under torch.no_grad() or torch.inference_mode())"
        )
    patched: list[tuple[nn.Module, str]] = []
    names: list[str] = []
    for name, module in model.named_modules():
        if isinstance(module, (FFN, GatedFFN)):
            cache = _cache_of(module)

            def ffn_forward(self: nn.Module, x: Tensor, _c: _TransposeCache = cache) -> Tensor:
                return sparse_ffn(self, x, method=method, down_t=_c.get(self.down.weight))

            _swap(module, ffn_forward, patched)
            names.append(name)
    if _has_hf_modules(model):
        from actlab.layout import mlp_layout

        named = dict(model.named_modules())
        for site in mlp_layout(model):
            down = named.get(site.down) if site.down else None
            if not isinstance(down, nn.Linear) or any(site.down.startswith(n + ".") for n in names):
                continue
            cache = _cache_of(down)

            def down_forward(self: nn.Linear, h: Tensor, _c: _TransposeCache = cache) -> Tensor:
                _check_inference(self)
                return sparse_down(
                    h, self.weight, self.bias, weight_t=_c.get(self.weight), method=method
                )

            _swap(down, down_forward, patched)
            names.append(site.down)
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


def _cache_of(module: nn.Module) -> _TransposeCache:
    """The module's transposed-weight cache; kept on the module so that later contexts reuse
    it (one extra copy of the down weight's memory)."""
    cache = module.__dict__.get(_CACHE_ATTR)
    if cache is None:
        cache = _TransposeCache()
        module.__dict__[_CACHE_ATTR] = cache
    return cache


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


def _has_hf_modules(model: nn.Module) -> bool:
    return any(type(m).__module__.startswith("transformers.") for m in model.modules())


def _check_method(method: str) -> None:
    if method not in METHODS:
        raise ValueError(f"unknown sparse FFN method {method!r} (valid: {', '.join(METHODS)})")


def _check_inference(module: nn.Module) -> None:
    """Refuse training: no backward through the gather, and dropout would be skipped."""
    if module.training or torch.is_grad_enabled():
        raise RuntimeError(
            f"sparse FFN forward of {type(module).__name__} is inference-only: call "
            "model.eval() and run under torch.no_grad() or torch.inference_mode() "
            f"(training={module.training}, grad enabled={torch.is_grad_enabled()})"
        )
