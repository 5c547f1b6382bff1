"""The probe's hooks: where each pass of a recorded step is observed.

:class:`ProbeHooks` is mixed into :class:`~actlab.probe.probe.Probe` and works on the state
``Probe.__init__`` sets up. It holds the hook factories (site, tap, in-place pre/post,
carrier, block, input, the eager point after a forward call), their attachment (once, for the
probe's life) and removal, and both paths of every hook: run eagerly, a hook files its pass
when the step is recorded; traced by ``torch.compile``, it computes the statistics under the
probe's device-side flag and hands them over in one attribute write, which
:meth:`ProbeHooks._harvest` files eagerly after the call; a site's backward statistics travel
through its carrier (:mod:`actlab.probe.compiled`). The weight-gradient hooks are in
:mod:`actlab.probe.grads`.

The places the hooks write to are :class:`_Where` (a site, block or module input) and
:class:`_Weight` (a tracked weight); each keeps the passes of the running step until
:meth:`~actlab.probe.probe.Probe.step` files them as records (:mod:`actlab.probe.records`).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from actlab.layout import is_dense as _is_dense
from actlab.probe import metrics as M
from actlab.probe.collectors import Collector
from actlab.probe.compiled import (
    TAP_SLOTS,
    GradTap,
    ensure_guards,
    find_compiled,
    gated,
    guard_on_hooks,
    native_frame,
    new_carrier,
    outside_dynamo,
    release_hooks,
    wrappers_around,
)

_CONV = (nn.Conv1d, nn.Conv2d, nn.Conv3d)


def _is_weight_layer(module: nn.Module) -> bool:
    """Linear and conv layers (and transformers' GPT-2 style ``Conv1D``) with a weight."""
    if isinstance(module, (nn.Linear, *_CONV)):
        return True
    return type(module).__name__ == "Conv1D" and isinstance(getattr(module, "weight", None),
                                                            torch.Tensor)


def _first_tensor(value: Any) -> torch.Tensor | None:
    """The first tensor in a module output (tensor, tuple/list, dict or ModelOutput)."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, Mapping):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        for item in value:
            found = _first_tensor(item)
            if found is not None:
                return found
    return None


# One collector's passes in the running step: (device raw, host metadata) per pass.
_Passes = dict[Collector, list[tuple[torch.Tensor, Any]]]

# State that changes within one call lives in dicts and lists, never in attributes: dynamo
# (2.13) drops the attribute writes made after a torch.cond to an object whose attributes
# were written before it, and reads back the old values, while it keeps every write to a
# dict or list. Each starts every call empty (Probe._harvest clears it), so the guards a
# graph takes on it hold from call to call.


@dataclass(eq=False)
class _Where:
    """A place the probe measures (site, block, module input) and its passes in this step."""

    name: str
    module: nn.Module
    bounds: tuple[float, float] | None = None
    eps: float = 1e-7
    tol: float = 0.01
    scratch: Callable[[int, torch.Tensor], torch.Tensor] | None = None
    passes: _Passes = field(default_factory=dict)
    hist: torch.Tensor | None = None
    # this call: "after_conv" (the last weight layer run before the site was a convolution),
    # "pending" (input of an in-place site, read before the call), "calls" (compiled passes)
    state: dict[str, Any] = field(default_factory=dict)
    # passes of a compiled call, (collector or None for histograms, raw, meta), filed by
    # Probe._harvest after the call
    out: list[tuple[Collector | None, torch.Tensor, Any]] = field(default_factory=list)
    grad_scale: float = 1.0  # 1 / world size: each rank's loss is its own mean
    global_batch: bool = False  # under a process group: unmergeable statistics keep the data
    # compiled models: the leaf whose gradient receives GradTap's rows
    carrier: torch.Tensor | None = None

    @property
    def after_conv(self) -> bool:
        """The last weight layer run before this pass of the site was a convolution."""
        return self.state.get("after_conv", False)


@dataclass(eq=False)
class _Weight:
    """A tracked weight: its snapshots and its passes in this step."""

    name: str
    param: nn.Parameter
    w0: torch.Tensor  # local shard under FSDP
    w_prev: torch.Tensor
    m0: torch.Tensor  # [mean, m2] of w0
    sharded: bool = False  # a DTensor shard: its statistics are reduced across ranks
    passes: _Passes = field(default_factory=dict)


class ProbeHooks:
    """The hook machinery of :class:`~actlab.probe.probe.Probe` (eager and traced)."""

    def _attach(self) -> None:
        """Register every hook, for the probe's whole life (:meth:`_detach` removes them).

        They stay whether or not the step is recorded: a model compiled now or later traces
        the hooks it holds when it compiles, and hooks that came and went would either be
        missing from its graph or recompile it at every switch.
        """
        add = self._handles.append
        guard_on_hooks()
        if self._want_fwd or self._want_bwd or self._outgrad_collectors or \
                self.hist_bins is not None:
            for site in self.sites:
                if getattr(site.module, "inplace", False):
                    # an in-place activation overwrites its input: read it before the call
                    add(site.module.register_forward_pre_hook(self._make_pre_hook(site)))
                    add(site.module.register_forward_hook(self._make_post_hook(site)))
                else:
                    if self._want_bwd:
                        add(site.module.register_forward_pre_hook(self._make_tap_hook(site)))
                    add(site.module.register_forward_hook(self._make_site_hook(site)))
                if self._want_bwd:
                    add(self._carrier(site).register_hook(self._make_carrier_hook(site)))
            if self._want_cov:
                for module in self.model.modules():
                    if _is_dense(module):
                        add(module.register_forward_hook(self._linear_hook))
            if self._want_kind:
                for module in self.model.modules():
                    if _is_weight_layer(module):
                        add(module.register_forward_hook(self._kind_hook))
        if self._want_blocks:
            for block in self.blocks:
                add(block.module.register_forward_hook(self._make_block_hook(block)))
        if self._want_inputs:
            for where in self.inputs:
                add(where.module.register_forward_hook(self._make_input_hook(where)))
        self._attach_grad_hooks()
        self._hook_after_calls(self.model, *find_compiled(self.model))
        self._dynamo_loaded()

    def _hook_after_calls(self, *modules: nn.Module) -> None:
        """Eager points after each call of ``modules``: compiled wrappers (their hooks run
        outside the graph) and the model itself (eager when it runs eagerly)."""
        for module in modules:
            if id(module) not in self._after_hooked:
                self._after_hooked.add(id(module))
                self._handles.append(module.register_forward_hook(self._after_forward))

    def _detach(self) -> None:
        if self._handles:
            release_hooks()
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._after_hooked.clear()
        self._now.clear()
        # the scratch buffers stay (freed by close()): a fresh activation-sized buffer at every
        # recorded step would cost its page faults again

    def _off(self) -> bool:
        """Whether a hook has nothing to do: the probe is paused, or, run eagerly, the step
        is not recorded. A traced hook never reads the recording state (it would become a
        guard, and its change a recompile): the device-side flag decides in the graph."""
        return self._paused or (not torch.compiler.is_compiling() and not self._recording)

    @native_frame
    def _after_forward(self, module: nn.Module, inputs: tuple, output: Any) -> None:
        """After a call of the probed model or a compiled wrapper in it: file what traced
        hooks handed over, and arrange for the weight gradients at the end of the backward."""
        if torch.compiler.is_compiling():  # inlined into a graph (a compiled nn.Sequential)
            return
        self._after_call(output)

    def _file_after_call(self, output: Any) -> None:
        """What :meth:`_after_forward` does, eagerly (:meth:`_dynamo_loaded` keeps dynamo
        out of it)."""
        self._harvest()
        self._watch_backward(output)

    def _dynamo_loaded(self) -> None:
        """Once dynamo is imported: guard graphs on hooks, and keep it out of the filing."""
        ensure_guards()
        if self._after_call == self._file_after_call and "torch._dynamo" in sys.modules:
            self._after_call = outside_dynamo(self._file_after_call)

    def _linear_hook(self, module: nn.Module, inputs: tuple, output: Any) -> None:
        if not self._off() and inputs and isinstance(output, torch.Tensor):
            self._now["last_linear"] = (output, inputs[0])

    def _kind_hook(self, module: nn.Module, inputs: tuple, output: Any) -> None:
        self._now["last_conv"] = isinstance(module, _CONV)

    def _feeding_input(self, p: torch.Tensor) -> torch.Tensor | None:
        """The input of the Linear whose output *is* ``p`` (same tensor object), if any."""
        last = self._now.get("last_linear")
        if not self._want_cov or last is None or last[0] is not p:
            return None
        if torch.compiler.is_compiling():  # consumed: the graph need not hand the tensors out
            del self._now["last_linear"]
        return last[1]

    def _observe_into(self, where: _Where, collectors: list[Collector], *tensors: Any) -> None:
        if not torch.compiler.is_compiling():
            for collector in collectors:
                where.passes.setdefault(collector, []).append(collector.observe(where, *tensors))
            return
        # host metadata (element counts) and the shapes of the statistics, whose values
        # nothing uses (the compiler drops them); the statistics themselves under the flag
        outside = [c.observe(where, *tensors) for c in collectors]

        def raws(*ts: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return tuple(c.observe(where, *ts)[0] for c in collectors)

        out = gated(self._flag, raws, tensors, [r for r, _ in outside])
        self._hand_over(where, [(c, r, m) for c, r, (_, m) in zip(collectors, out, outside)])

    def _hand_over(self, where: _Where, out: list[tuple[Collector | None, torch.Tensor, Any]]
                   ) -> None:
        # No read of per-step state: a compiled graph needs no new guard. ``where.out`` is
        # empty at the start of every call (_harvest clears it), so its guard holds.
        where.out.extend(out)
        self._now["traced"] = True

    def _harvest(self) -> None:
        """File the passes traced hooks handed over (eagerly, after a compiled call); on an
        unrecorded step they are dropped (the graph computed zeros for them)."""
        if self._now:
            self._traced = self._traced or self._now.get("traced", False)
            self._now.clear()
        keep = self._recording and not self._closed
        for where in self._wheres:
            if where.state:
                where.state.clear()
            if not where.out:
                continue
            out = list(where.out)
            where.out.clear()
            if not keep:
                continue
            for collector, raw, meta in out:
                if collector is None:  # histogram counts
                    where.hist = raw if where.hist is None else where.hist + raw
                else:
                    where.passes.setdefault(collector, []).append((raw, meta))

    def _drop_compiled_unsupported(self) -> None:
        """Leave out registered site-gradient collectors and the output-gradient ones on a
        compiled model, with a warning: only the built-in backward statistics of the site's
        input run inside the compiled backward (GradTap)."""
        dropped = self._compiled_unsupported()
        if dropped:
            warnings.warn(f"Probe on a torch.compile model: {dropped} read a gradient inside "
                          f"the model (dL/da, or a registered gradient metric) through a hook "
                          f"on an intermediate tensor, which would split the compiled graph; "
                          f"they are not recorded (probe the eager model for them)",
                          stacklevel=3)
        self._outgrad_collectors = []
        self._grad_collectors = self._tapped_collectors
        self._want_bwd = bool(self._grad_collectors)

    def _compiled_unsupported(self) -> list[str]:
        """The metrics a traced pass cannot record (hooks on intermediate tensors)."""
        foreign = [c for c in self._grad_collectors if c not in self._tapped_collectors]
        return [m for c in (*self._outgrad_collectors, *foreign) for m in c.metrics]

    def _noticed_compile(self) -> None:
        """Once, when hooks are first seen to have run inside a compiled graph: hook the
        compiled wrappers made since the probe was created, and name the metrics compiled
        passes cannot record (unless the probe was created on a compiled model and said so)."""
        if not self._traced or self._compile_noticed:
            return
        self._compile_noticed = True
        if not find_compiled(self.model):  # compiled by someone else: find their wrapper
            self._hook_after_calls(*wrappers_around(self.model))
        dropped = self._compiled_unsupported()
        if dropped:
            warnings.warn(f"probe: the model runs under torch.compile; {dropped} need a hook "
                          f"on an intermediate tensor inside the graph, so its compiled "
                          f"passes do not record them (probe the eager model for them)",
                          stacklevel=3)

    def _carrier(self, site: _Where) -> torch.Tensor:
        """The site's carrier, created once on the device of the model's parameters."""
        if site.carrier is None:
            site.carrier = new_carrier(self._flag.device)
        return site.carrier

    def _make_carrier_hook(self, site: _Where) -> Callable:
        def hook(rows: torch.Tensor) -> torch.Tensor:
            # one record per backward pass: its used rows are told apart on the host
            if not self._closed and self._recording:
                for collector in self._tapped_collectors:
                    site.passes.setdefault(collector, []).append((rows.detach(), None))
                self._backward_end.trigger()  # file the forward passes after this backward
            return torch.zeros_like(rows)  # nothing accumulates in the carrier's .grad
        return hook

    def _tap(self, site: _Where, p: torch.Tensor, x: torch.Tensor | None, fan: int,
             copy: bool) -> torch.Tensor:
        calls = site.state.get("calls", 0)
        site.state["calls"] = calls + 1
        slot = calls % TAP_SLOTS  # a constant of the trace: calls restarts at 0 each call
        return GradTap.apply(p, site.carrier, x, self._flag, slot, fan, copy)

    def _observe(self, site: _Where, p: torch.Tensor, a: torch.Tensor | None) -> None:
        if a is None:
            return
        site.state["after_conv"] = self._now.get("last_conv", False)
        self._observe_into(site, self._site_collectors, p, a)
        if self._outgrad_collectors and a.requires_grad and torch.is_grad_enabled() and \
                not torch.compiler.is_compiling():  # traced: named by _noticed_compile
            collectors = self._outgrad_collectors

            def on_out_grad(h: torch.Tensor) -> None:
                if not self._closed:
                    self._observe_into(site, collectors, h)

            a.register_hook(on_out_grad)
        if self.hist_bins is not None:
            low, high, bins = *self.hist_range, self.hist_bins

            def counts(p: torch.Tensor, a: torch.Tensor) -> tuple[torch.Tensor]:
                return (torch.stack([M.histogram_raw(p, bins, low, high),
                                     M.histogram_raw(a, bins, low, high)]),)

            if torch.compiler.is_compiling():
                dtype = torch.promote_types(M.stat_dtype(p.dtype), M.stat_dtype(a.dtype))
                like = [torch.empty(2, bins, dtype=dtype, device=p.device)]
                self._hand_over(site, [(None, gated(self._flag, counts, (p, a), like)[0], None)])
            else:
                (c,) = counts(p, a)
                site.hist = c if site.hist is None else site.hist + c

    def _scratch(self, numel: int, like: torch.Tensor) -> torch.Tensor:
        """A reusable flat buffer (one per dtype and device, grown as needed)."""
        dtype = M.stat_dtype(like.dtype)
        if torch.compiler.is_compiling():  # inductor plans its own buffers; a cache is a guard
            return torch.empty(numel, dtype=dtype, device=like.device)
        key = (dtype, like.device)
        buf = self._buffers.get(key)
        if buf is None or buf.numel() < numel:
            buf = torch.empty(numel, dtype=dtype, device=like.device)
            self._buffers[key] = buf
        return buf

    def _register_grad(self, site: _Where, p: torch.Tensor,
                       copy: bool = False) -> torch.Tensor | None:
        """Arrange for the statistics of ``dL/dp``: a hook on ``p`` (eager), or the tapped
        ``p`` to use instead (traced; ``copy`` for an in-place site)."""
        if not (self._want_bwd and p.requires_grad and torch.is_grad_enabled()):
            return None
        x = self._feeding_input(p)
        fan = p.shape[-1] * x.shape[-1] if x is not None else 0
        if torch.compiler.is_compiling():  # row sums of x in the backward, when recorded
            return self._tap(site, p, None if x is None else x.detach(), fan, copy)
        x_rows = None if x is None else M.input_row_sums(x)
        collectors = self._grad_collectors

        def on_grad(g: torch.Tensor) -> None:
            if not self._closed:
                self._observe_into(site, collectors, g, x_rows, fan)

        p.register_hook(on_grad)
        return None

    def _make_site_hook(self, site: _Where) -> Callable:
        def hook(module: nn.Module, inputs: tuple, output: Any) -> None:
            if self._off() or not inputs or not isinstance(inputs[0], torch.Tensor):
                return
            p = inputs[0]
            a = output if isinstance(output, torch.Tensor) else None
            self._observe(site, p, a)
            if not torch.compiler.is_compiling():  # traced: tapped before the call
                self._register_grad(site, p)
        return hook

    def _make_tap_hook(self, site: _Where) -> Callable:
        def hook(module: nn.Module, inputs: tuple) -> tuple | None:
            if not torch.compiler.is_compiling() or self._paused or not inputs or \
                    not isinstance(inputs[0], torch.Tensor):
                return None  # eager: the site hook registers a hook on the input instead
            tapped = self._register_grad(site, inputs[0])
            return None if tapped is None else (tapped, *inputs[1:])
        return hook

    def _make_pre_hook(self, site: _Where) -> Callable:
        def hook(module: nn.Module, inputs: tuple) -> tuple | None:
            if self._off() or not inputs or not isinstance(inputs[0], torch.Tensor):
                return None
            p = inputs[0]
            # keep a copy of p's moments: the in-place call is about to overwrite p
            site.state["pending"] = p.detach().clone()
            tapped = self._register_grad(site, p, copy=True)
            return None if tapped is None else (tapped, *inputs[1:])
        return hook

    def _make_post_hook(self, site: _Where) -> Callable:
        def hook(module: nn.Module, inputs: tuple, output: Any) -> None:
            p = site.state.pop("pending", None)
            if self._off() or p is None or not isinstance(output, torch.Tensor):
                return
            self._observe(site, p, output)
        return hook

    def _make_block_hook(self, block: _Where) -> Callable:
        collectors = self._by_target.get("block", [])

        def hook(module: nn.Module, inputs: tuple, output: Any) -> None:
            h = _first_tensor(output)
            if not self._off() and h is not None:
                self._observe_into(block, collectors, h)
        return hook

    def _make_input_hook(self, where: _Where) -> Callable:
        collectors = self._by_target.get("input", [])

        def hook(module: nn.Module, inputs: tuple, output: Any) -> None:
            if not self._off() and inputs and isinstance(inputs[0], torch.Tensor):
                self._observe_into(where, collectors, inputs[0])
        return hook
