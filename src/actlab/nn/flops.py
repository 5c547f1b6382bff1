"""What one forward pass of any model costs: FLOPs and the bytes autograd keeps for backward.

Both are read from a forward pass that may run on the ``meta`` device (shapes only, no
arithmetic), so the papers' models are priced on any machine in well under a second.

FLOPs (:class:`FlopCount`) are counted at the level of torch functions, by a
:class:`~torch.overrides.TorchFunctionMode`, from the shapes of the operands:

* ``F.linear`` (every ``nn.Linear``): ``2 * rows * in * out``;
* ``F.conv1d/2d/3d`` (every ``nn.Conv*d``): ``2 * (C_in / groups) * prod(kernel) * output elements``;
* ``F.scaled_dot_product_attention``: ``2 * rows * T_k * (E + E_v)`` (the scores and the
  weighted values over all key positions; a causal mask is not subtracted);
* ``torch.matmul`` / ``@`` / ``mm`` / ``bmm`` / ``addmm`` / ``baddbmm``: ``2 * output elements * K``.

Reading a value out of a meta tensor inside the mode (``int(t)``, ``t.item()``) gives a
placeholder (0, 0.5 or False), so that models with such reads are priced on ``meta`` too.

A multiply-add is two FLOPs; bias adds, norms, activations, softmax and elementwise work are not
counted (the convention of :class:`torch.utils.flop_counter.FlopCounterMode`, which counts the
same products at the ATen level, and against which the tests check this count on every model
family actlab prices). An operation outside the list (an ``einsum`` that multiplies, a custom
kernel) is not seen: the tests would show it as a difference.

Saved activations (:func:`saved_activation_bytes`) are the tensors autograd stores for the
backward pass during the forward, recorded by
:func:`torch.autograd.graph.saved_tensors_hooks`: each storage counted once (views of one
tensor share it), parameters left out (they are the weights, counted apart). On the meta
device attention runs as a fused kernel does on a GPU (flash attention keeps its inputs, its
output and the log-sum-exp, not the ``T x T`` scores). It is what the
backward pass needs at the batch, not the allocator's peak (temporaries of the forward,
workspace and fragmentation come on top).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

__all__ = ["FlopCount", "count_flops", "forward_cost", "saved_activation_bytes"]


def _numel(shape: torch.Size | tuple[int, ...]) -> int:
    return math.prod(int(s) for s in shape)


def _linear(args: tuple, kwargs: dict, out: Any) -> int:
    x, weight = args[0], args[1] if len(args) > 1 else kwargs["weight"]
    out_features, in_features = weight.shape
    return 2 * (_numel(x.shape) // in_features) * in_features * out_features


def _conv(args: tuple, kwargs: dict, out: Any) -> int:
    weight = args[1] if len(args) > 1 else kwargs["weight"]
    return 2 * int(weight.shape[1]) * _numel(weight.shape[2:]) * _numel(out.shape)


def _attention(args: tuple, kwargs: dict, out: Any) -> int:
    q = args[0] if args else kwargs["query"]
    k = args[1] if len(args) > 1 else kwargs["key"]
    v = args[2] if len(args) > 2 else kwargs["value"]
    rows = _numel(q.shape[:-1])
    return 2 * rows * int(k.shape[-2]) * (int(q.shape[-1]) + int(v.shape[-1]))


def _product(args: tuple, kwargs: dict, out: Any) -> int:
    # a @ b, mm, bmm, matmul: every output element sums K products (K = a's last dimension)
    a = args[0]
    return 2 * _numel(out.shape) * int(a.shape[-1])


def _product_added(args: tuple, kwargs: dict, out: Any) -> int:
    # addmm(bias, a, b), baddbmm(c, a, b): the product of a and b
    return 2 * _numel(out.shape) * int(args[1].shape[-1])


_RULES: dict[Callable[..., Any], Callable[[tuple, dict, Any], int]] = {
    F.linear: _linear,
    F.conv1d: _conv,
    F.conv2d: _conv,
    F.conv3d: _conv,
    F.scaled_dot_product_attention: _attention,
    torch.matmul: _product,
    torch.mm: _product,
    torch.bmm: _product,
    Tensor.__matmul__: _product,
    Tensor.matmul: _product,
    Tensor.mm: _product,
    Tensor.bmm: _product,
    torch.addmm: _product_added,
    torch.baddbmm: _product_added,
}


# Reading a value out of a meta tensor (a norm's step counter, a data-dependent branch) gets a
# placeholder, so that models with such reads are priced on the meta device too.
_READS = {Tensor.__int__, Tensor.__float__, Tensor.__bool__, Tensor.__index__, Tensor.item,
          Tensor.tolist}


def _placeholder(tensor: Tensor, func: Callable[..., Any]) -> Any:
    if func is Tensor.tolist:
        return torch.zeros(tensor.shape, dtype=tensor.dtype).tolist()
    if tensor.dtype == torch.bool or func is Tensor.__bool__:
        return False
    return 0.5 if tensor.is_floating_point() and func is not Tensor.__index__ else 0


def _fused_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                     dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
                     enable_gqa: bool = False) -> Tensor:
    """Attention on meta tensors through a fused kernel, as a GPU runs it: autograd keeps the
    inputs, the output and the log-sum-exp, not the ``T x T`` scores that the meta device's
    default (math) path would keep."""
    if enable_gqa and key.shape[-3] != query.shape[-3]:  # repeat the shared heads
        repeat = query.shape[-3] // key.shape[-3]
        key, value = key.repeat_interleave(repeat, -3), value.repeat_interleave(repeat, -3)
    if attn_mask is not None:
        # a learned bias as the mask (MaxViT's relative positions): the kernel takes no
        # gradient for it; its one (heads, T, T) copy is left out of the saved activations
        attn_mask = attn_mask.detach()
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale)[0]


@dataclass
class FlopCount:
    """FLOPs counted while the mode was active, in total and per kind of operation."""

    total: int = 0
    by_op: dict[str, int] = field(default_factory=dict)

    def add(self, name: str, flops: int) -> None:
        """Add ``flops`` of operation ``name``."""
        self.total += flops
        self.by_op[name] = self.by_op.get(name, 0) + flops


class _Counting(TorchFunctionMode):
    """Counts the FLOPs of the torch functions in :data:`_RULES` (module docstring)."""

    def __init__(self, count: FlopCount) -> None:
        super().__init__()
        self.count = count

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: D105
        kwargs = kwargs or {}
        if func in _READS and isinstance(args[0], Tensor) and args[0].is_meta:
            return _placeholder(args[0], func)
        if func is F.scaled_dot_product_attention and args and args[0].is_meta:
            out = _fused_attention(*args, **kwargs)
        else:
            out = func(*args, **kwargs)
        rule = _RULES.get(func)
        if rule is not None:
            self.count.add(getattr(func, "__name__", str(func)), rule(args, kwargs, out))
        return out


def count_flops() -> tuple[_Counting, FlopCount]:
    """``(mode, count)``: inside ``with mode:``, forward FLOPs accumulate in ``count``.

    Only what runs inside is counted; run the backward pass outside (its products are
    reached through autograd, not torch functions, and are not seen)."""
    count = FlopCount()
    return _Counting(count), count


def saved_activation_bytes(model: nn.Module, run: Callable[[], Any]) -> int:
    """Bytes of the tensors autograd saves for backward while ``run()`` does a forward pass
    of ``model`` (module docstring): each storage once, ``model``'s parameters left out."""
    params = {p.untyped_storage()._cdata for p in model.parameters()}
    seen: dict[int, int] = {}
    keep: list[Tensor] = []  # the tensors stay referenced, so no storage id is reused

    def pack(tensor: Tensor) -> Tensor:
        storage = tensor.untyped_storage()
        key = storage._cdata
        if key not in params and key not in seen:
            seen[key] = storage.nbytes()
            keep.append(tensor)
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        run()
    return sum(seen.values())


def forward_cost(model: nn.Module, *inputs: Any, call: Callable[..., Any] | None = None
                 ) -> tuple[int, int]:
    """``(flops, saved_bytes)`` of one forward pass ``call(model, *inputs)`` (default
    ``model(*inputs)``) with gradients enabled: the FLOPs of :func:`count_flops` and the
    bytes of :func:`saved_activation_bytes`."""
    call = call or (lambda module, *args: module(*args))
    mode, count = count_flops()

    def run() -> None:
        with torch.enable_grad(), mode:
            call(model, *inputs)

    saved = saved_activation_bytes(model, run)
    return count.total, saved
