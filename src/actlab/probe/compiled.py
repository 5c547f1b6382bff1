"""What the probe does so that ``torch.compile`` records what eager records, in one graph.

The probe's hooks stay attached for its whole life, on every model: whether the model is or
will be compiled (``torch.compile(model)``, a compiled submodule, a trainer that compiles it
later, ``model.compile()``) the probe cannot always see, and dynamo traces whatever hooks a
module holds when it compiles. Each hook asks ``torch.compiler.is_compiling()``:

* run eagerly, it reads the Python flag of the recorded step and returns at once when the
  step is not recorded;
* traced, it reads no per-step Python state (each read would be a guard, each change a
  recompile). Its statistics run under ``torch.cond`` on a device-side boolean, the probe's
  *flag* (:func:`gated`): the graph is the same on every step and an unrecorded step skips
  the statistics. ``Probe.step`` swaps the flag for the next step's (a graph input of the
  same shape and dtype: no recompile), as torchtitan's tensor statistics keep their logging
  cadence in a device flag (pytorch/torchtitan#4202). Inductor reads a ``torch.cond``
  predicate on the host: on a GPU each gated block synchronises once per call.

A traced hook hands the pass's device-side results to the eager side through a list (state
that changes within a call lives in dicts and lists, see :mod:`actlab.probe.hooks`); an
eager point after the call files them, or drops them on an unrecorded step: a forward hook
on the probed model (run natively, :func:`native_frame`) and on every compiled wrapper in or
around it (a wrapper's hooks run outside its graph; :func:`wrappers_around` finds one a
trainer made), the end of each backward pass, and ``Probe.step``. A compiled call that none of these follows before the next one finds state
its graph did not expect and recompiles: correct, only slower.

Dynamo does not guard a graph on module hooks by default (``skip_nnmodule_hook_guards``): a
graph traced for another instance of the same class before the probe existed, or for one
without a probe, would run the probed model without its hooks. While a probe is open, dynamo
guards on hooks (:func:`guard_on_hooks`); graphs compiled before that are dropped once.

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

import gc
import sys
from collections.abc import Callable, Sequence

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
    """The ``torch.compile`` wrappers in ``model`` (the root or any submodule), outermost first."""
    return [m for m in model.modules() if is_compiled_wrapper(m)]


def wrappers_around(model: nn.Module) -> list[nn.Module]:
    """The ``torch.compile`` wrappers elsewhere in the process that run ``model`` (directly or
    through DDP-style wrappers), e.g. the one a trainer made.

    A forward hook on a wrapper runs outside its graph, one on the model inside it. A wrapper
    is not reachable from what it wraps, so this scans the garbage collector's objects (a
    fraction of a second; the probe does it once, when its hooks first ran in a graph and
    no wrapper is in the model); none exists before dynamo is imported.
    """
    if "torch._dynamo" not in sys.modules:
        return []
    found = []
    for obj in gc.get_objects():
        if type(obj).__name__ != "OptimizedModule" or not is_compiled_wrapper(obj):
            continue
        inner = obj._orig_mod
        for _ in range(8):
            if inner is model:
                found.append(obj)
                break
            inner = getattr(inner, "_orig_mod", None) or getattr(inner, "module", None)
            if not isinstance(inner, nn.Module):
                break
    return found


def gated(flag: torch.Tensor, fn: Callable[..., tuple[torch.Tensor, ...]],
          operands: Sequence[torch.Tensor],
          like: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """``fn(*operands)`` when the device-side boolean ``flag`` is true, zeros shaped as the
    tensors ``like`` (what ``fn`` returns) otherwise, as one ``torch.cond`` of the graph being
    traced. ``operands`` are detached (statistics need no gradient).
    """
    shapes = [(tuple(t.shape), t.dtype, t.device) for t in like]

    def skipped(*args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(torch.zeros(shape, dtype=dtype, device=device)
                     for shape, dtype, device in shapes)

    return tuple(torch.cond(flag, fn, skipped, tuple(t.detach() for t in operands)))


# ----------------------------------------------------------------------------- hook guards
_open = [0]  # probes that hold hooks
_saved: list[bool] = []  # dynamo's own setting, restored when the last probe closes
_native: list = []  # code of the hooks dynamo runs natively when it meets them as frames
_skipped = [False]


def native_frame(fn: Callable) -> Callable:
    """Mark a hook that must run eagerly (decorator).

    A forward hook of a module that ``torch.compile(module)`` or ``module.compile()`` runs
    is called outside the graph, and dynamo compiles it as a frame of its own (an empty
    graph: the hook returns at once when it finds itself compiling). Marked, the frame runs
    natively instead, so the hook can file what the graph handed over; where dynamo inlines
    the hook into a graph (a compiled ``nn.Sequential``), it still returns at once there.
    Applied once dynamo is imported (:func:`ensure_guards`).
    """
    _native.append(fn.__code__)
    return fn


def outside_dynamo(fn: Callable) -> Callable:
    """``fn`` run with dynamo off, so that nothing it calls is compiled (``fn`` itself before
    dynamo is imported)."""
    if "torch._dynamo" not in sys.modules:
        return fn
    import torch._dynamo

    return torch._dynamo.disable(fn)


def guard_on_hooks() -> None:
    """Make dynamo guard compiled graphs on module hooks while a probe is open.

    Dynamo's default (``skip_nnmodule_hook_guards=True``) reuses a graph whatever hooks a
    module holds now: a graph compiled before the probe's hooks existed (another instance of
    the same class, an earlier run in the process) would run the probed model without them,
    and a graph traced with them could run another instance. Graphs compiled under the old
    setting carry no such guard, so they are dropped (compiled again at their next call).
    Nothing happens before dynamo is imported: importing it costs seconds, and whatever is
    compiled later is compiled with the setting (:func:`ensure_guards` applies it then).
    """
    _open[0] += 1
    ensure_guards()


def ensure_guards() -> None:
    """Apply :func:`guard_on_hooks` (and :func:`native_frame`) if dynamo has been imported
    since (idempotent)."""
    if _open[0] <= 0 or _saved or "torch._dynamo" not in sys.modules:
        return
    import torch._dynamo

    if not _skipped[0]:
        _skipped[0] = True
        for code in _native:
            torch._dynamo.eval_frame.skip_code(code)
    config = torch._dynamo.config
    _saved.append(config.skip_nnmodule_hook_guards)
    if config.skip_nnmodule_hook_guards:
        config.skip_nnmodule_hook_guards = False
        if _compiled_anything():
            torch._dynamo.reset_code_caches()


def release_hooks() -> None:
    """One probe closed: restore dynamo's setting when it was the last one open."""
    _open[0] = max(_open[0] - 1, 0)
    if _open[0] == 0 and _saved:
        import torch._dynamo

        torch._dynamo.config.skip_nnmodule_hook_guards = _saved.pop()


def _compiled_anything() -> bool:
    """Whether dynamo holds compiled code (graphs that may lack hook guards)."""
    from torch._dynamo import convert_frame

    refs = getattr(getattr(convert_frame, "input_codes", None), "seen", None)
    if refs is None:  # a dynamo without this record: assume the worst
        return True
    return any(ref() is not None for ref in refs)


# ----------------------------------------------------------------------------- backward taps
def new_carrier(device: torch.device) -> torch.Tensor:
    """A site's carrier: a leaf whose gradient receives the tap's rows (float64 where the
    device has it, so element counts stay exact)."""
    dtype = torch.float32 if device.type == "mps" else torch.float64
    return torch.zeros(TAP_SLOTS, TAP_WIDTH, dtype=dtype, device=device, requires_grad=True)


class GradTap(torch.autograd.Function):
    """Identity on ``p`` whose backward writes the statistics of ``g = dL/dp`` into row
    ``slot`` of the carrier's gradient: ``[1, numel, rows, fan, *backward_raw(g, x_rows)]``
    (``x_rows``: the row sums of ``x``, the input of the Linear that computed ``p``), the
    statistics computed only when ``flag`` was true at the forward pass (:func:`gated`).

    ``copy`` returns a copy instead of a view (an in-place activation modifies its input,
    which autograd forbids on a custom function's view).
    """

    @staticmethod
    def forward(
        ctx,
        p: torch.Tensor,
        carrier: torch.Tensor,
        x: torch.Tensor | None,
        flag: torch.Tensor,
        slot: int,
        fan: int,
        copy: bool,
    ) -> torch.Tensor:  # type: ignore[override]
        """``p`` unchanged; remembers what the backward needs."""
        ctx.slot, ctx.fan, ctx.carrier_dtype = slot, fan, carrier.dtype
        # the flag of this pass (the probe's flags are never written). The feeding Linear's
        # input is saved for its own backward anyway: its row sums are taken in the
        # backward, and only on recorded steps.
        ctx.save_for_backward(x, flag)
        return p.clone() if copy else p.view_as(p)

    @staticmethod
    def backward(ctx, g: torch.Tensor):  # type: ignore[override]
        """``g`` passes through; the carrier receives one row of statistics."""
        x, flag = ctx.saved_tensors
        like = [torch.empty(4, dtype=M.stat_dtype(g.dtype), device=g.device)]  # backward_raw
        if x is None:
            (raw,) = gated(flag, lambda g: (M.backward_raw(g, None),), (g,), like)
        else:
            (raw,) = gated(flag, lambda g, x: (M.backward_raw(g, M.input_row_sums(x)),),
                           (g, x), like)
        rows = g.numel() // max(g.shape[-1], 1) if g.dim() else 1
        head = torch.tensor(
            [1.0, float(g.numel()), float(rows), float(ctx.fan)],
            dtype=ctx.carrier_dtype,
            device=g.device,
        )
        out = torch.zeros(TAP_SLOTS, TAP_WIDTH, dtype=ctx.carrier_dtype, device=g.device)
        out[ctx.slot] = torch.cat([head, raw.to(ctx.carrier_dtype)])
        return g, out, None, None, None, None, None
