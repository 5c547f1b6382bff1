"""One autograd node for "activation, then subtract a constant, then centre": the fast path
of ``shift=`` and ``adaptive`` for activations that have an ATen backward kernel.

Forward computes f(x) into a fresh tensor and shifts/centres it in place; backward centres
the incoming gradient into one fresh tensor and applies f's backward kernel in place on it.
So the options add passes over memory but no allocations beyond the plain activation's,
which is what dominates on CPU. With the opt-in C++ kernels of :mod:`.native` enabled,
the shift and the centring run in the same pass as f instead. Double backward (``create_graph=True``, e.g. Hessian-vector
products) uses the same ATen kernels out of place, which are themselves differentiable.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from actlab.activations import native

aten = torch.ops.aten


@dataclass(frozen=True)
class FusedKernel:
    """Forward ``f(x)`` and backward ``grad_in = backward(grad_out, x)``; ``backward_into``
    writes the result into ``grad_out`` (which the caller owns)."""

    forward: Callable[[Tensor], Tensor]
    backward: Callable[[Tensor, Tensor], Tensor]
    backward_into: Callable[[Tensor, Tensor], Tensor]
    backward_differentiable: Callable[[Tensor, Tensor], Tensor] | None = None
    # The one-pass C++ kernel for this function (see native.py): its number and parameter.
    native_kind: int | None = None
    native_param: float = 0.0

    def backward_for_graph(self, grad: Tensor, x: Tensor) -> Tensor:
        """The backward, written with ops autograd can differentiate (double backward)."""
        return (self.backward_differentiable or self.backward)(grad, x)


def _silu_backward_differentiable(g: Tensor, x: Tensor) -> Tensor:
    s = torch.sigmoid(x)
    return g * (s + x * s * (1.0 - s))


def _kernel(name: str, params: dict) -> FusedKernel | None:
    if name == "relu":
        return FusedKernel(
            torch.relu,
            lambda g, x: aten.threshold_backward(g, x, 0),
            lambda g, x: aten.threshold_backward.grad_input(g, x, 0, grad_input=g),
            native_kind=native.KINDS["relu"],
        )
    if name == "gelu":
        approx = "tanh" if params.get("tanh") else "none"
        return FusedKernel(
            lambda x: F.gelu(x, approximate=approx),
            lambda g, x: aten.gelu_backward(g, x, approximate=approx),
            lambda g, x: aten.gelu_backward.grad_input(g, x, approximate=approx, grad_input=g),
            native_kind=None if approx == "tanh" else native.KINDS["gelu"],
        )
    if name == "silu" and params.get("beta", 1.0) == 1.0:
        return FusedKernel(
            F.silu,
            lambda g, x: aten.silu_backward(g, x),
            lambda g, x: aten.silu_backward.grad_input(g, x, grad_input=g),
            _silu_backward_differentiable,  # aten.silu_backward has no derivative
            native_kind=native.KINDS["silu"],
        )
    if name == "leaky_relu":
        slope = params.get("slope", 0.01)
        return FusedKernel(
            lambda x: F.leaky_relu(x, slope),
            lambda g, x: aten.leaky_relu_backward(g, x, slope, False),
            lambda g, x: aten.leaky_relu_backward.grad_input(g, x, slope, False, grad_input=g),
            native_kind=native.KINDS["leaky_relu"], native_param=float(slope),
        )
    return None


def fused_kernel(name: str, params: dict) -> FusedKernel | None:
    """The fused kernel of a built-in activation, or ``None`` where there is none."""
    return _kernel(name, params)


def _last_dim(x: Tensor, dim: int | None) -> bool:
    return dim is not None and dim in (-1, x.dim() - 1)


class _FusedShiftCenter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, kernel: FusedKernel, shift: Tensor,  # type: ignore[override]
                dim: int | None) -> Tensor:
        ctx.save_for_backward(x)
        ctx.kernel, ctx.dim = kernel, dim
        ctx.native = native.usable(x, kernel.native_kind) and (dim is None or _last_dim(x, dim))
        if ctx.native:  # one pass instead of two (shift) or four (centring)
            kind, param = kernel.native_kind, kernel.native_param
            if dim is None:
                return native.shift_forward(x, kind, param, float(shift))
            return native.center_forward(x, kind, param)
        y = kernel.forward(x)
        if dim is not None:  # centring removes any constant, so the shift is moot
            return y.sub_(y.mean(dim=dim, keepdim=True))
        return y.sub_(shift)

    @staticmethod
    def backward(ctx, grad_output: Tensor):  # type: ignore[override]
        (x,) = ctx.saved_tensors
        kernel, dim = ctx.kernel, ctx.dim
        graph = torch.is_grad_enabled()  # double backward: out of place, differentiable
        if dim is None:
            backward = kernel.backward_for_graph if graph else kernel.backward
            return backward(grad_output, x), None, None, None
        if ctx.native and not graph:
            return (native.center_backward(grad_output, x, kernel.native_kind,
                                           kernel.native_param), None, None, None)
        centred = grad_output - grad_output.mean(dim=dim, keepdim=True)
        if graph:
            return kernel.backward_for_graph(centred, x), None, None, None
        return kernel.backward_into(centred, x), None, None, None


def fused_shift_center(x: Tensor, kernel: FusedKernel, shift: Tensor,
                       dim: int | None = None) -> Tensor:
    """f(x) − shift (a 0-dim tensor: the module's ``offset``), or f(x) centred over ``dim``
    when ``dim`` is given, in one autograd node."""
    return _FusedShiftCenter.apply(x, kernel, shift, dim)
