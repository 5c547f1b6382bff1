"""``Probe``: measure what activations do inside any model while it trains.

``Probe`` owns the schedule, the hooks' lifecycle and the transfer to the host; the
arithmetic of each metric family lives in its collector (:mod:`actlab.probe.collectors`),
which is how :func:`actlab.register_metric` adds a metric without touching this file.

How it stays cheap:

* hooks exist only during recorded steps: they are registered when a recorded step begins
  and removed when it ends, so unrecorded steps run the bare model. On a model holding
  ``torch.compile`` wrappers they stay attached and a flag gates them instead, so the model
  keeps two graphs and never recompiles (:mod:`actlab.probe.compiled`);
* every statistic is reduced on the device to a few numbers per pass; nothing is moved to the
  host and nothing calls ``.item()`` until :meth:`Probe.table` (or :meth:`Probe.flush`);
* nothing per example is stored.

Step convention: steps are 0-based and :meth:`Probe.step` closes one. The rows of step ``t``
describe the state that training step ``t`` saw: activation and gradient statistics of its
forward/backward passes, weight statistics of the weights it ran with (after ``t`` optimizer
updates, recorded when step ``t - 1`` closed, so call ``probe.step()`` after
``optimizer.step()``), and the gradient it accumulated. After the last ``probe.step()`` the
weights of the next step (the final weights) are recorded if that step is on the schedule.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch
import torch.distributed as dist
from torch import nn

from actlab.errors import ConfigError
from actlab.probe import distributed as D
from actlab.probe import metrics as M
from actlab.probe.collectors import Collector, collectors_for
from actlab.probe.collectors.builtin import ActivationBackward
from actlab.probe.columns import COLUMNS
from actlab.probe.compiled import TAP_SLOTS, GradTap, find_compiled, new_carrier
from actlab.probe.forward import default_forward
from actlab.probe.merge import Stat, Stats
from actlab.probe.names import is_ddp, layer_name, unwrapped_modules
from actlab.probe.schedule import Schedule, as_schedule
from actlab.surgery import (
    Where,
    activation_bounds,
    closest_names,
    find_activations,
    select_sites,
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


def _is_dense(module: nn.Module) -> bool:
    """``nn.Linear`` or transformers' ``Conv1D`` (a linear layer with a transposed weight)."""
    return isinstance(module, nn.Linear) or (
        type(module).__name__ == "Conv1D" and not isinstance(module, _CONV))


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
    name: str
    param: nn.Parameter
    w0: torch.Tensor  # local shard under FSDP
    w_prev: torch.Tensor
    m0: torch.Tensor  # [mean, m2] of w0
    sharded: bool = False  # a DTensor shard: its statistics are reduced across ranks
    passes: _Passes = field(default_factory=dict)


def _frame(rows: list[tuple[int, str, str, float]]) -> pd.DataFrame:
    """Rows as the tidy table (columns step, layer, metric, value)."""
    return pd.DataFrame(rows, columns=COLUMNS).astype({"step": "int64", "value": "float64"})


class Probe:
    """Record activation, gradient, weight and hidden-state statistics of ``model`` in training.

    Args:
        model: any ``nn.Module``; it is never modified (hooks only, removed by :meth:`close`).
        every: schedule: an int N (steps 0, N, 2N, ...), ``"log"``/``"log:<per_decade>"``,
            a list of steps, or a :class:`~actlab.probe.schedule.Schedule`.
        activations: sites to probe: ``None`` finds them (:func:`actlab.find_activations`);
            names or glob patterns of any submodules, a predicate ``(name, module) -> bool``,
            or ``False`` for none.
        blocks: residual blocks (modules or names) whose output the ``block`` metrics read
            (``hidden_mean``, ``massive_ratio``).
        metrics: metric names (default: :data:`actlab.probe.metrics.ALL_METRICS`; the
            opt-in ``ACT_KURTOSIS`` and ``ACT_OUTPUT_GRAD`` families are named here); any name
            of :func:`actlab.probe.collectors.available_metrics`, including metrics added with
            :func:`actlab.register_metric`.
        weights: Linear/conv layers whose ``.weight`` is tracked: ``None`` = all, names,
            patterns or a predicate, ``False`` = none. Keeps two copies of each (initial and
            previously recorded) on the weight's device.
        eps: threshold of ``sparsity`` (``|a| < eps``) and of the dead-unit metrics.
        saturation_tol: distance to an output bound counted as saturated.
        histograms: number of fixed bins for pre-/post-activation histograms (``None``: off).
        hist_range: ``(low, high)`` of the histogram bins; values outside go to the edge bins.
        inputs: modules (or names) whose *input* the ``input`` metrics read, e.g. MLP
            down-projections for ``down_input_range``.
        writers: objects with ``write(df)`` (e.g.
            :class:`~actlab.probe.writers.TensorBoardWriter`) that receive each recorded
            step's rows as soon as the step closes (on rank 0 only under a process group);
            one that also has ``write_histograms(df)`` receives the histograms too.
        max_rows: keep at most this many rows (and histogram rows) in memory, the newest;
            ``None`` keeps all. With writers or ``max_rows`` rows are moved to the host when
            each recorded step closes, so memory and the cost of a record do not grow with
            the run. :meth:`table` returns the rows kept.
        distributed: merge the statistics of every rank of the default process group on each
            recorded step (``None``: when one is initialised with more than one rank). Needs
            the same model, schedule and probe on every rank, every rank calling
            :meth:`step` and :meth:`close`, and a loss that is each rank's own mean (the
            gradients DDP / FSDP average).

    Under a process group every statistic merges exactly (:mod:`actlab.probe.merge`), so the
    table equals that of one process seeing the global batch: activation statistics of all
    ranks' passes, weight statistics of the local shards (DTensor under FSDP2, never
    gathered), weight gradients read after the reduction (see :meth:`capture_grads`) and
    activation gradients scaled to the global mean loss. Create the probe after wrapping
    the model (DDP, ``fully_shard``).
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        every: int | str | Iterable[int] | Schedule = 1,
        activations: Where | bool = None,
        blocks: Iterable[nn.Module | str] | None = None,
        metrics: Iterable[str] | None = None,
        weights: Where | bool = None,
        eps: float = 1e-7,
        saturation_tol: float = 0.01,
        histograms: int | None = None,
        hist_range: tuple[float, float] = (-8.0, 8.0),
        inputs: Iterable[nn.Module | str] | None = None,
        writers: Iterable[Any] = (),
        max_rows: int | None = None,
        distributed: bool | None = None,
    ) -> None:
        self.model = model
        self.schedule = as_schedule(every)
        self.eps = float(eps)
        self.saturation_tol = float(saturation_tol)
        self.metrics = self._check_metrics(metrics)
        if histograms is not None and (not isinstance(histograms, int) or histograms < 1):
            raise ConfigError("histograms", f"must be a number of bins >= 1, got {histograms!r}")
        if not hist_range[0] < hist_range[1]:
            raise ConfigError("hist_range", f"needs low < high, got {hist_range!r}")
        self.hist_bins = histograms
        self.hist_range = (float(hist_range[0]), float(hist_range[1]))
        self.writers = self._check_writers(writers)
        if max_rows is not None and (not isinstance(max_rows, int) or isinstance(max_rows, bool)
                                     or max_rows < 0):
            raise ConfigError("max_rows", f"must be an integer >= 0 or None, got {max_rows!r}")
        self.max_rows = max_rows
        self.world = D.world() if distributed is not False else 1
        self.distributed = self.world > 1
        if distributed and not self.distributed:
            raise ConfigError("distributed", "needs an initialised process group with more "
                                             "than one rank")
        self._writes = not self.distributed or dist.get_rank() == 0

        collectors = collectors_for(self.metrics)
        if self.distributed:
            unmergeable = [c for c in collectors if not c.mergeable]
            if unmergeable:
                raise ConfigError("metrics", f"{unmergeable} cannot merge across the "
                                  f"{self.world} ranks: a Collector needs stats() and finish() "
                                  f"(actlab.probe.merge) under a process group")
        self._by_target: dict[str, list[Collector]] = {}
        for collector in collectors:
            self._by_target.setdefault(collector.target, []).append(collector)

        named = unwrapped_modules(model)
        self.sites = [self._where(n, m, activation_bounds(m)) for n, m in
                      self._resolve_sites(model, named, activations).items()]
        self.blocks = [self._where(n, m) for n, m in self._resolve_blocks(named, blocks).items()]
        self.inputs = [self._where(n, m) for n, m in self._resolve_blocks(named, inputs).items()]
        self.weights = self._snapshot_weights(named, weights)
        if self.distributed:
            for where in (*self.sites, *self.blocks, *self.inputs):
                where.grad_scale, where.global_batch = 1.0 / self.world, True

        self._site_collectors = self._by_target.get("site", [])
        self._grad_collectors = self._by_target.get("grad", [])
        self._want_fwd = bool(self._site_collectors)
        self._want_bwd = bool(self._grad_collectors)
        self._outgrad_collectors = self._by_target.get("outgrad", [])
        self._want_cov = "preact_grad_cov" in self.metrics
        self._want_kind = any(c.needs_layer_kind for c in collectors)
        self._want_wstate = "weight" in self._by_target
        self._want_wgrad = "wgrad" in self._by_target
        self._want_blocks = "block" in self._by_target
        self._want_inputs = "input" in self._by_target
        # Under torch.compile hooks that come and go recompile the model: there they stay
        # attached for the probe's lifetime and gate their work on ``_attached`` instead.
        self._compiled = find_compiled(model)
        self._persistent = bool(self._compiled)
        if self._persistent:
            self._drop_compiled_unsupported()

        self._step = 0
        self._handles: list[Any] = []
        self._attached = False
        self._paused = False
        self._closed = False
        self._last_linear: tuple[torch.Tensor, torch.Tensor, nn.Module] | None = None
        self._last_conv = False
        # Linear layers that fed a site (learned in the first recorded step; later steps hook
        # only these instead of every Linear)
        self._feeders: dict[int, nn.Module] = {}
        self._feeders_known = False
        self._saw_site = False
        self._buffers: dict[tuple[torch.dtype, torch.device], torch.Tensor] = {}
        # device-side, not yet read: (collector or None for histograms, step, where, raws, metas)
        self._records: list[tuple[Collector | None, int, Any, list[torch.Tensor], list[Any]]] = []
        self._rows: list[tuple[int, str, str, float]] = []  # host-side
        self._hist_rows: list[tuple[int, str, str, np.ndarray]] = []
        self._row_base = 0  # absolute index of self._rows[0] (older rows were dropped)
        self._written: dict[int, int] = {}
        # move rows to the host at every close, not when read (streaming, bounded, or merged)
        self._eager = self.distributed or bool(self.writers) or max_rows is not None
        self._grads_taken = False  # capture_grads() ran in this step
        self._weights_at = -1  # the step whose weights were last recorded

        if self._persistent:
            self._attach()  # for good: ``_attached`` switches the recording
            self._attached = self.schedule.due(0)
        elif self.schedule.due(0):
            self._attach()
        if self._attached:
            self._record_weights(0)

    # ------------------------------------------------------------------ construction helpers
    def _where(self, name: str, module: nn.Module,
               bounds: tuple[float, float] | None = None) -> _Where:
        return _Where(name, module, bounds, self.eps, self.saturation_tol, self._scratch)

    @staticmethod
    def _check_writers(writers: Iterable[Any]) -> tuple[Any, ...]:
        if writers is None:
            return ()
        chosen = tuple(writers) if isinstance(writers, (list, tuple)) else (writers,)
        for writer in chosen:
            if not callable(getattr(writer, "write", None)):
                raise TypeError(f"writers: {type(writer).__name__} has no write(df) method")
        return chosen

    @staticmethod
    def _check_metrics(metrics: Iterable[str] | None) -> tuple[str, ...]:
        if metrics is None:
            return M.ALL_METRICS
        chosen = (metrics,) if isinstance(metrics, str) else tuple(metrics)
        collectors_for(chosen)  # ValueError naming the closest for an unknown name
        return chosen

    @staticmethod
    def _resolve_sites(model: nn.Module, named: dict[str, nn.Module],
                       activations: Where | bool) -> dict[str, nn.Module]:
        if activations is False:
            return {}
        if activations is None or activations is True:
            strip_module = is_ddp(model)
            return {layer_name(n, strip_module=strip_module): m
                    for n, m in find_activations(model).items()}
        candidates = {n: m for n, m in named.items() if n}
        return select_sites(candidates, activations, what="module")

    @staticmethod
    def _resolve_blocks(named: dict[str, nn.Module],
                        blocks: Iterable[nn.Module | str] | None) -> dict[str, nn.Module]:
        if blocks is None:
            return {}
        by_id = {id(m): n for n, m in named.items()}
        out: dict[str, nn.Module] = {}
        for block in blocks:
            if isinstance(block, nn.Module):
                if id(block) not in by_id:
                    raise ValueError(f"block {type(block).__name__} is not a submodule of the model")
                out[by_id[id(block)]] = block
            elif block in named:
                out[block] = named[block]
            else:
                raise ValueError(f"unknown block {block!r}; closest: {closest_names(block, named)}")
        return out

    def _snapshot_weights(self, named: dict[str, nn.Module], weights: Where | bool) -> list[_Weight]:
        if weights is False or not ({"weight", "wgrad"} & set(self._by_target)):
            return []
        layers = {n: m for n, m in named.items() if _is_weight_layer(m)}
        if weights is not None and weights is not True:
            layers = select_sites(layers, weights, what="weight layer")
        out = []
        seen: set[int] = set()
        for name, layer in layers.items():
            param = layer.weight
            if id(param) in seen or not isinstance(param, torch.Tensor):
                continue  # tied weights are tracked once
            seen.add(id(param))
            # the local shard of an FSDP2 DTensor: statistics are reduced, never gathered
            w0 = M._stat_dtype(D.local(param.detach())).clone().contiguous()
            out.append(_Weight(name, param, w0, w0.clone(), M.initial_moments(w0),
                               D.is_sharded(param)))
        return out

    # ------------------------------------------------------------------ hooks
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

    # ------------------------------------------------------------------ stepping
    def _record_weights(self, step: int) -> None:
        if not self._want_wstate:
            return
        with torch.no_grad():
            for weight in self.weights:
                for collector in self._by_target["weight"]:
                    raw, meta = collector.observe(weight, weight.param, weight)
                    self._records.append((collector, step, weight, [raw], [meta]))
        self._weights_at = step

    def capture_grads(self) -> None:
        """Read the tracked weights' gradients now, for the step being recorded.

        Call it after the backward pass and before the optimizer clears the gradients (e.g.
        just before ``optimizer.step()``). Without a process group the probe needs no call (a
        hook reads each gradient once accumulated). Under DDP that hook would read the local
        gradient before the all-reduce, and FSDP2 fills a shard's gradient after its
        reduce-scatter, so under a process group :meth:`step` reads ``.grad`` itself when
        this was not called: then call ``probe.step()`` before ``optimizer.zero_grad()``.
        """
        if self._closed or not self._attached or not self._want_wgrad:
            return
        collectors = self._by_target["wgrad"]
        with torch.no_grad():
            for weight in self.weights:
                grad = weight.param.grad
                if grad is None:
                    if self.distributed:  # a hook's local record is not the reduced gradient
                        for collector in collectors:
                            weight.passes.pop(collector, None)
                    continue
                for collector in collectors:
                    weight.passes[collector] = [collector.observe(weight, grad)]
        self._grads_taken = True

    def _close_step(self, step: int) -> None:
        # Only list moves here: stacking and conversion wait for flush(), off the hot path.
        if self.distributed and not self._grads_taken:
            self.capture_grads()
        self._grads_taken = False
        for where in (*self.sites, *self.blocks, *self.inputs, *self.weights):
            for collector, passes in where.passes.items():
                self._records.append((collector, step, where, [r for r, _ in passes],
                                      [m for _, m in passes]))
            where.passes = {}
        for site in self.sites:
            if site.hist is not None:
                self._records.append((None, step, site, [site.hist], []))
                site.hist = None
        self._last_linear = None

    def step(self) -> None:
        """Close the current training step (call it after ``optimizer.step()``).

        Under a process group it is collective on recorded steps: every rank calls it.
        """
        if self._closed:
            raise RuntimeError("Probe.step() after close()")
        recorded = self._attached
        if self._attached:
            if self._persistent:
                self._harvest()  # passes run outside a compiled wrapper's call
            self._close_step(self._step)
            if self._want_cov and not self._feeders_known and self._saw_site and \
                not self._persistent:
                self._feeders_known = True
                self._detach()  # re-attached below, hooking only the learned feeders
        self._step += 1
        due = self.schedule.due(self._step)
        if self._persistent:
            self._attached = due  # the hooks stay; this flag gates them
        elif due and not self._attached:
            self._attach()
        elif not due and self._attached:
            self._detach()
        if due:
            self._record_weights(self._step)
        # decided by the schedule alone, so every rank reduces at the same steps
        if self._eager and (recorded or due):
            self._flush_records()

    @property
    def current_step(self) -> int:
        """The 0-based index of the training step now running."""
        return self._step

    # ------------------------------------------------------------------ reading
    def flush(self) -> None:
        """Move pending device-side records to the host (one transfer per device).

        Under a process group the records are merged when each recorded step closes (in
        :meth:`step`, collectively) and this does nothing.
        """
        if not self.distributed:
            self._flush_records()

    def _host_values(self, records: list) -> list[list[np.ndarray]]:
        """The records' tensors on the host, in float64 (one transfer per device)."""
        tensors = [t for rec in records for t in rec[3]]
        by_device: dict[torch.device, list[int]] = {}
        for i, t in enumerate(tensors):
            by_device.setdefault(t.device, []).append(i)
        host: list[np.ndarray] = [np.empty(0)] * len(tensors)
        for idx in by_device.values():
            flat = torch.cat([tensors[i].detach().reshape(-1).to(torch.float64) for i in idx]).cpu()
            values = flat.numpy()
            offset = 0
            for i in idx:
                size = tensors[i].numel()
                host[i] = values[offset:offset + size].reshape(tuple(tensors[i].shape))
                offset += size
        out, cursor = [], 0
        for rec in records:
            out.append(host[cursor:cursor + len(rec[3])])
            cursor += len(rec[3])
        return out

    def _flush_records(self) -> None:
        """Pool, merge (across ranks under a process group) and store the pending records."""
        records, self._records = self._records, []
        if not records and not self.distributed:
            return
        stats: list[Stats | None] = []
        values: list[Any] = []
        for (collector, _, where, _, metas), parts in zip(records, self._host_values(records)):
            # passes of different sizes (e.g. a last, smaller batch) cannot be stacked
            same = len({p.shape for p in parts}) <= 1
            stacked = np.stack(parts) if parts and same else parts
            values.append(stacked)
            if collector is None:  # histogram counts: pre and post
                stats.append({"counts": Stat("sum", stacked.sum(axis=0))})
            else:
                stats.append(collector.stats(where, stacked, metas) if collector.mergeable
                             else None)
        if self.distributed:
            # replicated weights (DDP) are identical on every rank: only shards are reduced
            shared = [i for i, rec in enumerate(records) if getattr(rec[2], "sharded", True)]
            for i, merged in zip(shared, D.reduce_stats([stats[i] for i in shared])):
                stats[i] = merged
        wanted = set(self.metrics)
        rows: list[tuple[int, str, str, float]] = []
        hist: list[tuple[int, str, str, np.ndarray]] = []
        for (collector, step, where, _, metas), value, st in zip(records, values, stats):
            if collector is None:
                counts = st["counts"].value
                hist += [(step, where.name, "pre", counts[0]), (step, where.name, "post", counts[1])]
                continue
            out = collector.finish(where, st) if st is not None else \
                collector.combine(where, value, metas)
            rows.extend((step, where.name, metric, float(v))
                        for metric, v in out.items() if metric in wanted)
        self._store(rows, hist)

    def _store(self, rows: list[tuple[int, str, str, float]],
               hist: list[tuple[int, str, str, np.ndarray]]) -> None:
        """Send new rows to the writers (rank 0), keep them, and drop the oldest beyond
        ``max_rows`` (cost bounded by ``max_rows``, not by the run's length)."""
        if rows and self.writers and self._writes:
            frame = _frame(rows)
            for writer in self.writers:
                writer.write(frame)
        hist_writers = [w for w in self.writers if callable(getattr(w, "write_histograms", None))]
        if hist and hist_writers and self._writes:
            frame = self._hist_frame(hist)
            for writer in hist_writers:
                writer.write_histograms(frame)
        self._rows.extend(rows)
        self._hist_rows.extend(hist)
        if self.max_rows is not None:
            excess = len(self._rows) - self.max_rows
            if excess > 0:
                del self._rows[:excess]
                self._row_base += excess
            excess = len(self._hist_rows) - self.max_rows
            if excess > 0:
                del self._hist_rows[:excess]

    def table(self) -> pd.DataFrame:
        """The recorded values kept in memory (all of them unless ``max_rows``) as a tidy
        DataFrame with columns step, layer, metric, value."""
        self.flush()
        return _frame(self._rows)

    def histograms(self) -> pd.DataFrame:
        """Recorded histograms: columns step, layer, kind (pre/post), bin_left, bin_right, count."""
        self.flush()
        if self.hist_bins is None:
            raise ValueError("no histograms: create the Probe with histograms=<bins>")
        return self._hist_frame(self._hist_rows)

    def _hist_frame(self, hist: list[tuple[int, str, str, np.ndarray]]) -> pd.DataFrame:
        """Histogram rows as the frame :meth:`histograms` returns."""
        edges = np.linspace(*self.hist_range, self.hist_bins + 1)
        frames = [pd.DataFrame({"step": step, "layer": name, "kind": kind,
                                "bin_left": edges[:-1], "bin_right": edges[1:], "count": counts})
                  for step, name, kind, counts in hist]
        if not frames:
            return pd.DataFrame(columns=["step", "layer", "kind", "bin_left", "bin_right", "count"])
        return pd.concat(frames, ignore_index=True)

    # ------------------------------------------------------------------ dead units
    def dead_units(self, loader: Iterable[Any], *, forward: Callable[[Any], Any] | None = None
                   ) -> pd.DataFrame:
        """Per site, the share of units never active (``|a| > eps``) over the whole ``loader``.

        Exact: a per-unit "ever active" mask is OR-ed over all batches. Beside it,
        ``dead_frac_per_batch`` is the mean over batches of the share of units inactive on that
        batch alone, the estimate one mini-batch would give (never below the exact value).
        A unit is a feature of the last dimension, or a channel (dim 1) when the last weight
        layer before the site is a convolution. Runs under ``torch.no_grad()`` and does not
        switch train/eval mode: call ``model.eval()`` first if you want inference behaviour.
        ``forward(batch)`` runs the model; by default dict batches are passed as keywords,
        tuples/lists by their first element, tensors as they are (moved to the model's device).
        One pass of :func:`actlab.measure_once` with the dead-unit metrics.

        Returns a DataFrame with columns layer, units, dead_frac, dead_frac_per_batch, batches.
        """
        names = {site.name for site in self.sites}
        batches = [0]

        def counted() -> Iterable[Any]:
            for batch in loader:
                batches[0] += 1
                yield batch

        self._paused = True  # this probe's own hooks must not see the extra passes
        try:
            table = measure_once(self.model, counted(), metrics=("dead_frac", "dead_frac_per_batch",
                                                                 "n_units"),
                                 activations=lambda name, module: name in names, eps=self.eps,
                                 forward=forward)
        finally:
            self._paused = False
        wide = table.pivot(index="layer", columns="metric", values="value")
        rows = [{"layer": site.name, "units": int(wide.at[site.name, "n_units"]),
                 "dead_frac": float(wide.at[site.name, "dead_frac"]),
                 "dead_frac_per_batch": float(wide.at[site.name, "dead_frac_per_batch"]),
                 "batches": batches[0]}
                for site in self.sites if site.name in wide.index]
        return pd.DataFrame(rows, columns=["layer", "units", "dead_frac", "dead_frac_per_batch",
                                           "batches"])

    # ------------------------------------------------------------------ writers
    def write(self, writer: Any) -> int:
        """Send the rows not yet sent to ``writer`` (anything with ``write(df)``, e.g.
        :class:`~actlab.probe.writers.TensorBoardWriter`); returns how many were sent.

        Rows already dropped by ``max_rows`` are skipped (pass ``writers=`` to stream every
        row); under a process group only rank 0 sends."""
        self.flush()
        # only the rows not yet sent are converted: the cost does not grow with the table
        start = max(self._written.get(id(writer), 0), self._row_base)
        new = self._rows[start - self._row_base:]
        self._written[id(writer)] = self._row_base + len(self._rows)
        if not new or not self._writes:
            return 0
        writer.write(_frame(new))
        return len(new)

    def to_csv(self, path: Any) -> None:
        """Write the table as CSV."""
        from actlab.probe.writers import write_csv

        write_csv(self.table(), path)

    def to_parquet(self, path: Any) -> None:
        """Write the table as Parquet (needs pyarrow: ``pip install actlab[parquet]``)."""
        from actlab.probe.writers import write_parquet

        write_parquet(self.table(), path)

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps of the probe: the step, the step whose weights were last
        recorded, and per tracked weight its initial (``w0``) and last recorded (``w_prev``)
        snapshots with ``w0``'s moments (``m0``), as tensors; under FSDP2 the local shards
        (save one per rank). Recorded rows are not included: stream them with ``writers``.
        """
        return {"step": self._step, "weights_at": self._weights_at,
                "weights": {w.name: {"w0": w.w0.clone(), "w_prev": w.w_prev.clone(),
                                     "m0": w.m0.clone()} for w in self.weights}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from :meth:`state_dict` output (load the model's weights first).

        Pending records of the new probe (e.g. the weights it recorded when created) are
        dropped; the weights of the resumed step are recorded unless the saved run already had.
        """
        if self._closed:
            raise RuntimeError("Probe.load_state_dict() after close()")
        try:
            step, weights_at, saved = int(state["step"]), int(state["weights_at"]), state["weights"]
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a Probe state_dict: {exc!r}") from None
        names = [w.name for w in self.weights]
        if sorted(saved) != sorted(names):
            raise ValueError(f"probe state tracks weights {sorted(saved)}, this probe {sorted(names)}")
        for weight in self.weights:
            for key in ("w0", "w_prev", "m0"):
                mine, theirs = getattr(weight, key), saved[weight.name][key]
                if tuple(theirs.shape) != tuple(mine.shape):
                    raise ValueError(f"probe state: {weight.name}.{key} has shape "
                                     f"{tuple(theirs.shape)}, expected {tuple(mine.shape)}")
                mine.copy_(theirs)
            weight.passes = {}
        for where in (*self.sites, *self.blocks, *self.inputs):
            where.passes, where.hist = {}, None
        self._records.clear()
        self._step, self._weights_at = step, weights_at
        due = self.schedule.due(step)
        if self._persistent:
            self._attached = due
        elif due and not self._attached:
            self._attach()
        elif not due and self._attached:
            self._detach()
        if due and weights_at != step:
            self._record_weights(step)

    # ------------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Remove every hook and drop the weight snapshots; recorded values stay readable.

        Under a process group it is collective when the unfinished step is recorded: call it
        on every rank, before destroying the process group.
        """
        if self._closed:
            return
        recorded = self._attached
        if self._attached:
            if self._persistent:
                self._harvest()
            if self.distributed:
                # the unfinished step had no optimizer step: its .grad is the last step's
                self._grads_taken = True
                for weight in self.weights:
                    weight.passes = {c: v for c, v in weight.passes.items() if c.target != "wgrad"}
            self._close_step(self._step)
        self._detach()
        if not self.distributed:
            self.flush()
        elif recorded and dist.is_initialized():  # collective, like step()
            self._flush_records()
        else:
            self._records.clear()
        self._closed = True
        self._buffers.clear()
        for weight in self.weights:
            weight.w0 = weight.w_prev = torch.empty(0)

    def __enter__(self) -> Probe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Probe(sites={len(self.sites)}, weights={len(self.weights)}, "
                f"blocks={len(self.blocks)}, step={self._step}, schedule={self.schedule!r})")


#: Collector targets that need a backward pass (``measure_once`` runs without gradients).
_BACKWARD_TARGETS = ("grad", "outgrad", "wgrad")


def measure_once(model: nn.Module, inputs: Iterable[Any], *, metrics: Iterable[str],
                 activations: Where | bool = None,
                 blocks: Iterable[nn.Module | str] | None = None,
                 modules: Iterable[nn.Module | str] | None = None,
                 eps: float = 1e-7, saturation_tol: float = 0.01,
                 forward: Callable[[Any], Any] | None = None,
                 eval_mode: bool = False) -> pd.DataFrame:
    """Forward-only probe metrics pooled over every batch of ``inputs``.

    One :class:`~actlab.probe.probe.Probe` step over all of ``inputs`` under
    ``torch.no_grad()``: each batch is run with ``forward(batch)`` (default
    :func:`default_forward`), and the statistics of all passes are pooled exactly as the
    probe pools several passes of a training step. ``activations``, ``blocks``, ``eps`` and
    ``saturation_tol`` are as for ``Probe``; ``modules`` are the modules whose input the
    ``input`` metrics read (``down_input_range``). The model's train/eval mode is left as it
    is unless ``eval_mode=True``, which runs in eval mode and restores the previous mode.
    Weight-state metrics describe the current weights; backward metrics raise ``ValueError``.

    Returns the tidy frame with columns layer, metric, value.
    """
    chosen = (metrics,) if isinstance(metrics, str) else tuple(metrics)
    backward = [m for c in collectors_for(chosen) if c.target in _BACKWARD_TARGETS
                for m in c.metrics if m in chosen]
    if backward:
        raise ValueError(f"measure_once runs without gradients; metrics {backward} need a "
                         f"backward pass: record them with actlab.Probe during training")
    run = forward if forward is not None else (lambda batch: default_forward(model, batch))
    was_training = model.training
    if eval_mode:
        model.eval()
    # a local measurement: it may run on one rank only, so it never merges across ranks
    probe = Probe(model, every=[0], activations=activations, blocks=blocks, metrics=chosen,
                  eps=eps, saturation_tol=saturation_tol, inputs=modules, distributed=False)
    try:
        with torch.no_grad():
            for batch in inputs:
                run(batch)
        probe.step()
        table = probe.table()
    finally:
        probe.close()
        model.train(was_training)
    return table.drop(columns="step").reset_index(drop=True)
