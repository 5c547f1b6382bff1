"""The probe's hooks: where each pass of a recorded step is observed.

:class:`ProbeHooks` is mixed into :class:`~actlab.probe.probe.Probe` and works on the state
``Probe.__init__`` sets up. It holds the eight hook factories (site, tap, in-place pre/post,
carrier, block, input, weight gradient), their attachment and removal, and the compiled side:
on a model holding ``torch.compile`` wrappers the hooks hand each pass over in one attribute
write and :meth:`ProbeHooks._harvest`, run eagerly after every compiled call, files it; a
site's backward statistics travel through its carrier (:mod:`actlab.probe.compiled`).

The places the hooks write to are :class:`_Where` (a site, block or module input) and
:class:`_Weight` (a tracked weight); each keeps the passes of the running step until
:meth:`~actlab.probe.probe.Probe.step` files them as records (:mod:`actlab.probe.records`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from actlab.layout import is_dense as _is_dense
from actlab.probe import metrics as M
from actlab.probe.collectors import Collector
from actlab.probe.collectors.builtin import ActivationBackward
from actlab.probe.compiled import TAP_SLOTS, GradTap, new_carrier

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


@dataclass(eq=False)
class _Where:
    """A place the probe measures (site, block, module input) and its passes in this step."""

    name: str
    module: nn.Module
    bounds: tuple[float, float] | None = None
    eps: float = 1e-7
    tol: float = 0.01
    scratch: Callable[[int, torch.Tensor], torch.Tensor] | None = None
    after_conv: bool = False  # the last weight layer run before this site was a convolution
    passes: _Passes = field(default_factory=dict)
    hist: torch.Tensor | None = None
    pending: torch.Tensor | None = None  # input of an in-place site, read before the call
    # passes of a compiled call, (collector or None for histograms, raw, meta), filed by
    # Probe._harvest after the call
    out: list[tuple[Collector | None, torch.Tensor, Any]] | None = None
    grad_scale: float = 1.0  # 1 / world size: each rank's loss is its own mean
    global_batch: bool = False  # under a process group: unmergeable statistics keep the data
    # compiled models: the leaf whose gradient receives GradTap's rows, and this call's passes
    carrier: torch.Tensor | None = None
    calls: int = 0


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
    """The hook machinery of :class:`~actlab.probe.probe.Probe` (eager and compiled)."""

    def _attach(self) -> None:
        add = self._handles.append
        if self._want_fwd or self._want_bwd or self._outgrad_collectors or \
                self.hist_bins is not None:
            for site in self.sites:
                if getattr(site.module, "inplace", False):
                    # an in-place activation overwrites its input: read it before the call
                    add(site.module.register_forward_pre_hook(self._make_pre_hook(site)))
                    add(site.module.register_forward_hook(self._make_post_hook(site)))
                else:
                    if self._persistent and self._want_bwd:
                        add(site.module.register_forward_pre_hook(self._make_tap_hook(site)))
                    add(site.module.register_forward_hook(self._make_site_hook(site)))
                if self._persistent and self._want_bwd:
                    add(self._carrier(site).register_hook(self._make_carrier_hook(site)))
            if self._want_cov:
                dense = (self._feeders.values() if self._feeders_known
                         else [m for m in self.model.modules() if _is_dense(m)])
                for module in dense:
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
        # Under a process group a hook would read the local gradient before its reduction;
        # step() / capture_grads() read the reduced one and would discard the hook's record.
        if self._want_wgrad and not self.distributed:
            for weight in self.weights:
                if weight.param.requires_grad:
                    add(weight.param.register_post_accumulate_grad_hook(self._make_grad_hook(weight)))
        for wrapper in self._compiled:  # eager, after each compiled call
            add(wrapper.register_forward_hook(self._harvest))
        self._attached = True

    def _detach(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._last_linear = None
        # the scratch buffers stay (freed by close()): a fresh activation-sized buffer at every
        # recorded step would cost its page faults again
        self._attached = False

    def _linear_hook(self, module: nn.Module, inputs: tuple, output: Any) -> None:
        if not self._paused and inputs and isinstance(output, torch.Tensor):
            self._last_linear = (output, inputs[0], module)

    def _kind_hook(self, module: nn.Module, inputs: tuple, output: Any) -> None:
        self._last_conv = isinstance(module, _CONV)

    def _feeding_rows(self, p: torch.Tensor) -> tuple[torch.Tensor | None, int]:
        """Row sums of the input of the Linear whose output *is* ``p`` (same tensor object)."""
        self._saw_site = True  # a backward-tracked site pass happened: feeders can be learned
        last = self._last_linear
        if not self._want_cov or last is None or last[0] is not p:
            return None, 0
        x = last[1]
        if not self._persistent:  # learned to hook only the feeders from the next step on
            self._feeders[id(last[2])] = last[2]
        else:  # consumed: the graph need not hand the tensors out
            self._last_linear = None
        return M.input_row_sums(x), x.shape[-1]

    def _observe_into(self, where: _Where, collectors: list[Collector], *tensors: Any) -> None:
        if self._persistent:
            self._hand_over(where, [(c, *c.observe(where, *tensors)) for c in collectors])
            return
        for collector in collectors:
            where.passes.setdefault(collector, []).append(collector.observe(where, *tensors))

    @staticmethod
    def _hand_over(where: _Where, out: list[tuple[Collector | None, torch.Tensor, Any]]) -> None:
        # One attribute write, no read of per-step state: a compiled graph needs no new guard.
        # ``where.out`` is None at the start of every call (_harvest resets it), so reading it
        # here guards on a value that stays the same.
        where.out = out if where.out is None else where.out + out

    def _harvest(self, *_: Any) -> None:
        """File the passes the hooks handed over during a compiled call (runs eagerly)."""
        self._last_conv = False  # read before any write in a graph: keep its guard stable
        self._last_linear = None
        for where in (*self.sites, *self.blocks, *self.inputs):
            out, where.out, where.calls = where.out, None, 0
            for collector, raw, meta in out or ():
                if collector is None:  # histogram counts
                    where.hist = raw if where.hist is None else where.hist + raw
                else:
                    where.passes.setdefault(collector, []).append((raw, meta))

    def _drop_compiled_unsupported(self) -> None:
        """Leave out registered site-gradient collectors and the output-gradient ones on a
        compiled model, with a warning: only the built-in backward statistics of the site's
        input run inside the compiled backward (GradTap)."""
        if self._outgrad_collectors:
            dropped = [m for c in self._outgrad_collectors for m in c.metrics]
            warnings.warn(f"Probe on a torch.compile model: {dropped} read dL/da through a "
                          f"hook on the activation's output, which would split the compiled "
                          f"graph; they are not recorded (probe the eager model for them)",
                          stacklevel=3)
            self._outgrad_collectors = []
        foreign = [c for c in self._grad_collectors if not isinstance(c, ActivationBackward)]
        if foreign:
            dropped = [m for c in foreign for m in c.metrics]
            warnings.warn(f"Probe on a torch.compile model: {dropped} read the gradient at an "
                          f"activation through a hook on an intermediate tensor, which would "
                          f"split the compiled graph; they are not recorded (probe the eager "
                          f"model for them)", stacklevel=3)
            self._grad_collectors = [c for c in self._grad_collectors if c not in foreign]
            self._want_bwd = bool(self._grad_collectors)

    def _carrier(self, site: _Where) -> torch.Tensor:
        """The site's carrier, created once on the device of the model's parameters."""
        if site.carrier is None:
            param = next(iter(site.module.parameters()), None) or \
                next(iter(self.model.parameters()), None)
            site.carrier = new_carrier(param.device if param is not None else torch.device("cpu"))
        return site.carrier

    def _make_carrier_hook(self, site: _Where) -> Callable:
        def hook(rows: torch.Tensor) -> torch.Tensor:
            # one record per backward pass: its used rows are told apart on the host
            if not self._closed and self._attached:
                for collector in self._grad_collectors:
                    site.passes.setdefault(collector, []).append((rows.detach(), None))
            return torch.zeros_like(rows)  # nothing accumulates in the carrier's .grad
        return hook

    def _tap(self, site: _Where, p: torch.Tensor, x_rows: torch.Tensor | None, fan: int,
             copy: bool) -> torch.Tensor:
        slot = site.calls % TAP_SLOTS  # a constant of the trace: calls restarts at 0 each call
        site.calls += 1
        return GradTap.apply(p, site.carrier, x_rows, slot, fan, copy)

    def _observe(self, site: _Where, p: torch.Tensor, a: torch.Tensor | None) -> None:
        if a is None:
            return
        site.after_conv = self._last_conv
        self._observe_into(site, self._site_collectors, p, a)
        if self._outgrad_collectors and a.requires_grad and torch.is_grad_enabled():
            collectors = self._outgrad_collectors

            def on_out_grad(h: torch.Tensor) -> None:
                if not self._closed:
                    self._observe_into(site, collectors, h)

            a.register_hook(on_out_grad)
        if self.hist_bins is not None:
            low, high = self.hist_range
            counts = torch.stack([M.histogram_raw(p, self.hist_bins, low, high),
                                  M.histogram_raw(a, self.hist_bins, low, high)])
            if self._persistent:
                self._hand_over(site, [(None, counts, None)])
            else:
                site.hist = counts if site.hist is None else site.hist + counts

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
        ``p`` to use instead (compiled models; ``copy`` for an in-place site)."""
        if not (self._want_bwd and p.requires_grad and torch.is_grad_enabled()):
            return None
        x_rows, d_in = self._feeding_rows(p)
        fan = p.shape[-1] * d_in if x_rows is not None else 0
        if self._persistent:
            return self._tap(site, p, x_rows, fan, copy)
        collectors = self._grad_collectors

        def on_grad(g: torch.Tensor) -> None:
            if not self._closed:
                self._observe_into(site, collectors, g, x_rows, fan)

        p.register_hook(on_grad)
        return None

    def _make_site_hook(self, site: _Where) -> Callable:
        def hook(module: nn.Module, inputs: tuple, output: Any) -> None:
            if self._paused or not self._attached or not inputs or \
                    not isinstance(inputs[0], torch.Tensor):
                return
            p = inputs[0]
            a = output if isinstance(output, torch.Tensor) else None
            self._observe(site, p, a)
            if not self._persistent:  # compiled models: tapped before the call
                self._register_grad(site, p)
        return hook

    def _make_tap_hook(self, site: _Where) -> Callable:
        def hook(module: nn.Module, inputs: tuple) -> tuple | None:
            if self._paused or not self._attached or not inputs or \
                    not isinstance(inputs[0], torch.Tensor):
                return None
            tapped = self._register_grad(site, inputs[0])
            return None if tapped is None else (tapped, *inputs[1:])
        return hook

    def _make_pre_hook(self, site: _Where) -> Callable:
        def hook(module: nn.Module, inputs: tuple) -> None:
            if self._paused or not self._attached or not inputs or \
                    not isinstance(inputs[0], torch.Tensor):
                return
            p = inputs[0]
            # keep a copy of p's moments: the in-place call is about to overwrite p
            site.pending = p.detach().clone()
            tapped = self._register_grad(site, p, copy=True)
            return None if tapped is None else (tapped, *inputs[1:])
        return hook

    def _make_post_hook(self, site: _Where) -> Callable:
        def hook(module: nn.Module, inputs: tuple, output: Any) -> None:
            p = site.pending
            if self._paused or not self._attached or p is None or \
                    not isinstance(output, torch.Tensor):
                return
            site.pending = None
            self._observe(site, p, output)
        return hook

    def _make_block_hook(self, block: _Where) -> Callable:
        collectors = self._by_target.get("block", [])

        def hook(module: nn.Module, inputs: tuple, output: Any) -> None:
            h = _first_tensor(output)
            if not self._paused and self._attached and h is not None:
                self._observe_into(block, collectors, h)
        return hook

    def _make_input_hook(self, where: _Where) -> Callable:
        collectors = self._by_target.get("input", [])

        def hook(module: nn.Module, inputs: tuple, output: Any) -> None:
            if not self._paused and self._attached and inputs and \
                    isinstance(inputs[0], torch.Tensor):
                self._observe_into(where, collectors, inputs[0])
        return hook

    def _make_grad_hook(self, weight: _Weight) -> Callable:
        collectors = self._by_target.get("wgrad", [])

        def hook(param: torch.Tensor) -> None:
            # the last call of a step sees the fully accumulated gradient: it replaces the others
            if not self._closed and self._attached and param.grad is not None:
                for collector in collectors:
                    weight.passes[collector] = [collector.observe(weight, param.grad)]
        return hook
