"""A fused ensemble path for :class:`~actlab.nn.residual_mlp.ResidualMLP` (opt-in C++).

A vmapped ensemble runs each op over all members at once, so every ``(members, batch, m)``
intermediate is written to memory by one op and read back by the next; on a CPU whose last
level cache is smaller than a step's working set, that traffic costs as much as the matrix
products. ``csrc/residual_stack.cpp`` instead takes one member at a time through all of its
blocks, forward and backward, while that member's ``(batch, m)`` intermediates stay in L2;
the matrix products are single-threaded BLAS calls and the threads take different members.
It stores only each block's input and LayerNorm statistics for backward and recomputes the
rest (one more small matrix product per block, cheaper here than the memory traffic).

It applies to pre-norm models without biases whose blocks all use one of ``relu``,
``gelu`` (erf form), ``silu``, ``sigmoid`` or ``tanh``, optionally with a fixed shift
(``relu:shift=theory``; the shift may differ between members, each member's activation
``offset`` buffer is read), on float32/float64 CPU
tensors. It is used by :class:`~actlab.train.ensemble.Ensemble` when the native kernels are
enabled (:func:`actlab.activations.native.enable` or ``ACTLAB_NATIVE_KERNELS=1``); in every
other case the ensemble uses vmap as before. Results agree with the vmapped path to
rounding. It supports first derivatives only (training), not double backward.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from actlab.activations import native
from actlab.activations.spec_activation import SpecActivation

SOURCE = Path(__file__).with_name("csrc") / "residual_stack.cpp"
# The activations the stack kernel covers; their numbers are native.KINDS (leaky_relu is
# left out: the kernel passes no slope).
ACTIVATIONS = ("relu", "gelu", "silu", "sigmoid", "tanh")


def extension() -> ModuleType | None:
    """The compiled kernels when native kernels are enabled and usable, else ``None``."""
    if not native.enabled():
        return None
    module = native.load_extension("actlab_residual_stack", [SOURCE])
    return module if module is not None and module.has_blas() else None


def activation_kind(act: nn.Module) -> int | None:
    """The kernel number of a block activation the kernels cover, else ``None``.

    Any shift is fine (the kernel reads each member's ``offset``); other options, such as
    ``clip``, ``adaptive`` or ``topk``, change the function.
    """
    if type(act) is not SpecActivation or act.needs_calibration:
        return None  # an uncalibrated shift=measured raises on the vmap path instead
    parsed = act.parsed
    if parsed.name not in ACTIVATIONS or parsed.flags or set(parsed.options) - {"shift", "q"}:
        return None
    return native.KINDS[parsed.name]


def fused_plan(model: nn.Module) -> tuple[int, float] | None:
    """``(kind, eps)`` if ``model``'s structure suits the kernels, else ``None``."""
    if getattr(model, "norm", None) != "pre" or getattr(model, "bias", True):
        return None
    kinds = {activation_kind(block.act) for block in model.blocks}
    norms = {(block.norm.eps, block.norm.elementwise_affine, block.norm.bias is not None)
             for block in model.blocks}
    if len(kinds) != 1 or None in kinds or len(norms) != 1:
        return None
    eps, affine, has_bias = norms.pop()
    if not (affine and has_bias):
        return None
    return kinds.pop(), float(eps)


def _by_kind(weights: tuple[Tensor, ...] | list[Tensor], blocks: int) -> list[list[Tensor]]:
    """The flat weight list as [LayerNorm weights, LayerNorm biases, up, down], per block."""
    return [list(weights[i * blocks:(i + 1) * blocks]) for i in range(4)]


class _StackFunction(torch.autograd.Function):
    """The fused forward; backward through the C++ kernel (first order only)."""

    @staticmethod
    def forward(ctx, x: Tensor, shift: Tensor, kind: int, eps: float, ext: ModuleType,
                blocks: int, *weights: Tensor) -> Tensor:
        ln_w, ln_b, w_up, w_down = _by_kind(weights, blocks)
        y, xs, mean, rstd = ext.stack_forward(x, ln_w, ln_b, w_up, w_down, shift, kind, eps)
        ctx.save_for_backward(xs, mean, rstd, shift, *weights)
        ctx.kind, ctx.blocks, ctx.ext = kind, blocks, ext
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_y: Tensor):
        xs, mean, rstd, shift, *weights = ctx.saved_tensors
        ln_w, ln_b, w_up, w_down = _by_kind(weights, ctx.blocks)
        gx, *stacked = ctx.ext.stack_backward(grad_y, xs, mean, rstd, ln_w, ln_b, w_up, w_down,
                                              shift, ctx.kind)
        grads = [g for block_grads in stacked for g in block_grads.unbind(0)]
        return (gx, None, None, None, None, None, *grads)


def ensemble_forward(model: nn.Module, params: Mapping[str, Tensor],
                     buffers: Mapping[str, Tensor], x: Tensor) -> Tensor | None:
    """Forward of a whole stacked ensemble of ``model``'s architecture, or ``None``.

    ``params``/``buffers`` are stacked over a leading member dimension (as from
    :func:`torch.func.stack_module_state`), ``x`` is ``(members, batch, d)``. ``None`` means
    the kernels do not apply (disabled, unbuilt, another structure, dtype or device) and the
    caller should use vmap. The model hands over its tensors through
    ``model.fused_tensors(params, buffers)`` (see :class:`~actlab.nn.residual_mlp.ResidualMLP`).
    """
    if x.dim() != 3 or x.device.type != "cpu" or x.dtype not in (torch.float32, torch.float64):
        return None
    ext = extension()  # None when the native kernels are off: the common, cheap case
    plan = fused_plan(model) if ext is not None else None
    if plan is None:
        return None
    kind, eps = plan
    tensors = model.fused_tensors(params, buffers)
    if tensors is None:
        return None
    ln_w, ln_b, w_up, w_down, shifts = tensors
    if any(t.dtype != x.dtype for t in (*ln_w, *ln_b, *w_up, *w_down)):
        return None
    blocks, members = len(ln_w), x.shape[0]
    shift = torch.stack(shifts).to(x.dtype).reshape(blocks, members).contiguous()
    weights = [t.contiguous() for t in (*ln_w, *ln_b, *w_up, *w_down)]
    return _StackFunction.apply(x.contiguous(), shift, kind, eps, ext, blocks, *weights)
