"""What the probe does differently when (part of) the model runs under ``torch.compile``.

Dynamo guards a compiled graph on the hooks of every module it traces, so hooks registered
and removed around recorded steps would recompile the model at every switch. A probe on a
model holding ``torch.compile`` wrappers therefore keeps its hooks attached for its whole
life and gates their work on a flag: the compiled model has exactly two graphs, one that
records and one that does not, and switching between them costs a guard check.

Inside a compiled graph a hook must not read state that changes from pass to pass (each
read becomes a guard, each change a recompile). The hooks hand each pass's device-side
statistics to the eager side in one attribute write; a forward hook on each compiled
wrapper, which runs outside the graph after every compiled call, files them.

Backward statistics of an activation site would need a hook on an intermediate tensor,
which dynamo compiles only under compiled autograd. Instead the site's input goes through
:class:`GradTap`, an identity whose backward computes the statistics of ``g = dL/dp`` in the
compiled backward graph and returns them as the gradient of a small leaf tensor, the site's
*carrier*; a hook on that leaf (eager, after the compiled backward) files them. Each pass of
a site within one compiled call writes its own row of the carrier (the row index is a
constant of the trace), so a module called several times in one forward keeps its passes
apart.
"""

from __future__ import annotations

import torch
from torch import nn

from actlab.probe import metrics as M

#: rows of a carrier: the passes of one site one compiled call can keep apart
TAP_SLOTS = 64
#: a carrier row: ``[passes, numel, rows, fan]`` then :func:`~actlab.probe.metrics.backward_raw`
TAP_WIDTH = 8


def is_compiled_wrapper(module: nn.Module) -> bool:
    """Whether ``module`` is the wrapper ``torch.compile(module)`` returns."""
    # by name: importing torch._dynamo to check the class costs a second at import time
    return type(module).__name__ == "OptimizedModule" and isinstance(
        getattr(module, "_orig_mod", None), nn.Module
    )


def find_compiled(model: nn.Module) -> list[nn.Module]:
    """The ``torch.compile`` wrappers in ``model`` (the root or any submodule), outermost first.

    ``module.compile()`` (compiling in place) leaves no wrapper, hence no eager point after a
    compiled call: such a model is probed like an eager one (correct, but every switch of
    the recording on or off recompiles it).
    """
    return [m for m in model.modules() if is_compiled_wrapper(m)]


def new_carrier(device: torch.device) -> torch.Tensor:
    """A site's carrier: a leaf whose gradient receives the tap's rows (float64 where the
    device has it, so element counts stay exact)."""
    dtype = torch.float32 if device.type == "mps" else torch.float64
    return torch.zeros(TAP_SLOTS, TAP_WIDTH, dtype=dtype, device=device, requires_grad=True)


class GradTap(torch.autograd.Function):
    """Identity on ``p`` whose backward writes the statistics of ``g = dL/dp`` into row
    ``slot`` of the carrier's gradient: ``[1, numel, rows, fan, *backward_raw(g, x_rows)]``.

    ``copy`` returns a copy instead of a view (an in-place activation modifies its input,
    which autograd forbids on a custom function's view).
    """

    @staticmethod
    def forward(
        ctx,
        p: torch.Tensor,
        carrier: torch.Tensor,
        x_rows: torch.Tensor | None,
        slot: int,
        fan: int,
        copy: bool,
    ) -> torch.Tensor:  # type: ignore[override]
        """``p`` unchanged; remembers what the backward needs."""
        ctx.slot, ctx.fan, ctx.carrier_dtype = slot, fan, carrier.dtype
        ctx.save_for_backward(x_rows)
        return p.clone() if copy else p.view_as(p)

    @staticmethod
    def backward(ctx, g: torch.Tensor):  # type: ignore[override]
        """``g`` passes through; the carrier receives one row of statistics."""
        (x_rows,) = ctx.saved_tensors
        raw = M.backward_raw(g, x_rows)
        rows = g.numel() // max(g.shape[-1], 1) if g.dim() else 1
        head = torch.tensor(
            [1.0, float(g.numel()), float(rows), float(ctx.fan)],
            dtype=ctx.carrier_dtype,
            device=g.device,
        )
        out = torch.zeros(TAP_SLOTS, TAP_WIDTH, dtype=ctx.carrier_dtype, device=g.device)
        out[ctx.slot] = torch.cat([head, raw.to(ctx.carrier_dtype)])
        return g, out, None, None, None, None
