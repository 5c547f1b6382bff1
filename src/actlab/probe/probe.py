"""``Probe``: measure what activations do inside any model while it trains.

``Probe`` owns the construction (what is measured, checked up front), the schedule and the
lifecycle of a recorded step (this file); the hooks that observe each pass live in
:mod:`actlab.probe.hooks`, the records, the table, the writers and the checkpoint in
:mod:`actlab.probe.records`, and the one-shot measurement :func:`actlab.measure_once` in
:mod:`actlab.probe.measure`. The arithmetic of each metric family lives in its collector
(:mod:`actlab.probe.collectors`), which is how :func:`actlab.register_metric` adds a metric
without touching the probe.

How it stays cheap:

* on an unrecorded step a hook returns at once (eagerly) or skips its statistics under a
  device-side flag (traced by ``torch.compile``): the hooks stay attached for the probe's
  life, so a compiled model has one graph whatever the schedule, and every graph, however
  and whenever the model is compiled, holds them (:mod:`actlab.probe.compiled`);
* every statistic is reduced on the device to a few numbers per pass; nothing is moved to the
  host and nothing calls ``.item()`` until :meth:`Probe.table` (or :meth:`Probe.flush`);
* nothing per example is stored.

Step convention: steps are 0-based and :meth:`Probe.step` closes one. The rows of step ``t``
describe the state that training step ``t`` saw: activation and gradient statistics of its
forward/backward passes, weight statistics of the weights it ran with (after ``t`` optimizer
updates, recorded when step ``t - 1`` closed, so call ``probe.step()`` after
``optimizer.step()``), and the gradient it accumulated. After the last ``probe.step()`` the
weights of the next step (the final weights) are recorded if that step is on the schedule.
Weight gradients are read at the end of each backward pass (:mod:`actlab.probe.grads`), so
``optimizer.zero_grad()`` may come before or after ``probe.step()``, under DDP too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pandas as pd
import torch
import torch.distributed as dist
from torch import nn

from actlab.errors import ConfigError, renamed_keywords
from actlab.probe import distributed as D
from actlab.probe import metrics as M
from actlab.probe.collectors import Collector, collectors_for
from actlab.probe.collectors.builtin import ActivationBackward
from actlab.probe.compiled import find_compiled
from actlab.probe.forward import default_forward
from actlab.probe.grads import AfterBackward, ProbeGrads
from actlab.probe.hooks import (
    ProbeHooks,
    _is_dense,  # noqa: F401  (its import path before the split)
    _is_weight_layer,
    _Weight,
    _Where,
)
from actlab.probe.names import is_ddp, layer_name, unwrapped_modules
from actlab.probe.records import ProbeRecords
from actlab.probe.schedule import Schedule, as_schedule
from actlab.surgery import (
    Where,
    activation_bounds,
    closest_names,
    find_activations,
    select_sites,
)

#: The metrics :meth:`Probe.dead_units` reads in its one extra pass.
DEAD_UNIT_METRICS = ("dead_frac", "dead_frac_per_batch", "n_units")


class Probe(ProbeHooks, ProbeGrads, ProbeRecords):
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
        input_modules: modules (or names) whose *input* the ``input`` metrics read, e.g. MLP
            down-projections for ``down_input_range`` (its old name ``inputs=`` still works
            for one release, with a ``DeprecationWarning``).
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
    gathered), weight gradients read after the reduction (at the end of each backward pass,
    :mod:`actlab.probe.grads`) and activation gradients scaled to the global mean loss.
    Create the probe after wrapping the model (DDP, ``fully_shard``), and after moving it to
    its device.

    Under ``torch.compile`` (the probed model compiled, a compiled submodule, or a trainer
    that compiles it) the compiled passes record what eager passes record, in one graph
    whatever the schedule (:mod:`actlab.probe.compiled`).
    """

    @renamed_keywords(inputs="input_modules")
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
        input_modules: Iterable[nn.Module | str] | None = None,
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
        self._order = {collector: i for i, collector in enumerate(collectors)}
        for collector in collectors:
            self._by_target.setdefault(collector.target, []).append(collector)

        named = unwrapped_modules(model)
        self.sites = [self._where(n, m, activation_bounds(m)) for n, m in
                      self._resolve_sites(model, named, activations).items()]
        self.blocks = [self._where(n, m) for n, m in self._resolve_blocks(named, blocks).items()]
        self.inputs = [self._where(n, m) for n, m in self._resolve_blocks(named, input_modules).items()]
        self.weights = self._snapshot_weights(named, weights)
        if self.distributed:
            for where in (*self.sites, *self.blocks, *self.inputs):
                where.grad_scale, where.global_batch = 1.0 / self.world, True

        self._site_collectors = self._by_target.get("site", [])
        self._grad_collectors = self._by_target.get("grad", [])
        # the gradient collectors a traced pass records (through GradTap's carriers)
        self._tapped_collectors = [c for c in self._grad_collectors
                                   if isinstance(c, ActivationBackward)]
        self._want_fwd = bool(self._site_collectors)
        self._want_bwd = bool(self._grad_collectors)
        self._outgrad_collectors = self._by_target.get("outgrad", [])
        self._want_cov = "preact_grad_cov" in self.metrics
        self._want_kind = any(c.needs_layer_kind for c in collectors)
        self._want_wstate = "weight" in self._by_target
        self._want_wgrad = "wgrad" in self._by_target
        self._want_blocks = "block" in self._by_target
        self._want_inputs = "input" in self._by_target
        if find_compiled(model):  # known now: say up front what compiled passes cannot record
            self._drop_compiled_unsupported()
        self._wheres = (*self.sites, *self.blocks, *self.inputs)

        self._step = 0
        self._handles: list[Any] = []
        self._recording = False  # the step now running is recorded (read by eager hooks)
        # ... and the same on the device, for traced hooks: one of two constant tensors (a
        # graph guards on a tensor's shape and dtype, not on which tensor it is; a flag
        # flipped in place would also change under a backward that saved it)
        param = next(iter(model.parameters()), None)
        device = param.device if param is not None else torch.device("cpu")
        self._flags = (torch.zeros((), dtype=torch.bool, device=device),
                       torch.ones((), dtype=torch.bool, device=device))
        self._flag = self._flags[0]
        self._paused = False
        self._closed = False
        self._traced = False  # hooks ran inside a compiled graph
        self._compile_noticed = False
        self._after_hooked: set[int] = set()  # modules with the after-call hook
        self._after_call = self._file_after_call
        # this call (cleared by _harvest): "last_linear" (output and input of the last Linear
        # run), "last_conv" (it was a convolution), "traced" (hooks ran in a graph)
        self._now: dict[str, Any] = {}
        self._touched: set[_Weight] = set()  # weights whose gradient this backward reached
        self._backward_end = AfterBackward(self._after_backward)
        self._buffers: dict[tuple[torch.dtype, torch.device], torch.Tensor] = {}
        # device-side, not yet read: (collector or None for histograms, step, where, raws, metas)
        self._records: list[tuple[Collector | None, int, Any, list[torch.Tensor], list[Any]]] = []
        self._rows: list[tuple[int, str, str, float]] = []  # host-side
        self._hist_rows: list[tuple[int, str, str, np.ndarray]] = []
        self._row_base = 0  # absolute index of self._rows[0] (older rows were dropped)
        self._written: dict[int, int] = {}
        # move rows to the host at every close, not when read (streaming, bounded, or merged)
        self._eager = self.distributed or bool(self.writers) or max_rows is not None
        self._grads_taken = False  # this step's gradients were read
        self._weights_at = -1  # the step whose weights were last recorded

        self._attach()
        self._set_recording(self.schedule.due(0))
        if self._recording:
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

    def _set_recording(self, due: bool) -> None:
        """Record the step now running or not: the Python flag for eager hooks, the device
        flag (the same graph input, no recompile) for traced ones."""
        self._recording = bool(due)
        self._flag = self._flags[self._recording]

    def _close_step(self, step: int) -> None:
        # Only list moves here: stacking and conversion wait for flush(), off the hot path.
        if self.distributed and not self._grads_taken:
            self.capture_grads()
        self._grads_taken = False
        for where in (*self._wheres, *self.weights):
            # in the order of the metrics, however the passes arrived (eager, compiled)
            for collector in sorted(where.passes, key=self._order.__getitem__):
                passes = where.passes[collector]
                self._records.append((collector, step, where, [r for r, _ in passes],
                                      [m for _, m in passes]))
            where.passes = {}
        for site in self.sites:
            if site.hist is not None:
                self._records.append((None, step, site, [site.hist], []))
                site.hist = None
        self._now.pop("last_linear", None)

    def step(self) -> None:
        """Close the current training step (call it after ``optimizer.step()``).

        Under a process group it is collective on recorded steps: every rank calls it.
        """
        if self._closed:
            raise RuntimeError("Probe.step() after close()")
        recorded = self._recording
        self._harvest()  # compiled calls no eager point followed
        self._dynamo_loaded()  # dynamo may have been imported since the probe was created
        self._noticed_compile()
        if recorded:
            self._close_step(self._step)
        self._step += 1
        due = self.schedule.due(self._step)
        self._set_recording(due)
        if due:
            self._record_weights(self._step)
        # decided by the schedule alone, so every rank reduces at the same steps
        if self._eager and (recorded or due):
            self._flush_records()

    @property
    def current_step(self) -> int:
        """The 0-based index of the training step now running."""
        return self._step

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
        One pass of :func:`actlab.measure_once` with the dead-unit metrics
        (:data:`DEAD_UNIT_METRICS`).

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
            # a second, local probe over the same sites (what measure_once runs)
            was_training = self.model.training
            once = Probe(self.model, every=[0], activations=lambda name, module: name in names,
                         metrics=DEAD_UNIT_METRICS, eps=self.eps, distributed=False)
            table = once._pass_once(counted(), forward, was_training)
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

    def _pass_once(self, batches: Iterable[Any], forward: Callable[[Any], Any] | None,
                   was_training: bool) -> pd.DataFrame:
        """Record this probe's one step over every batch without gradients, then close it and
        put the model back in ``was_training`` mode; the table without its step column.

        The pass of :func:`actlab.measure_once` and of :meth:`dead_units` (a probe created
        with ``every=[0]`` for it).
        """
        run = forward if forward is not None else (lambda batch: default_forward(self.model, batch))
        try:
            with torch.no_grad():
                for batch in batches:
                    run(batch)
            self.step()
            table = self.table()
        finally:
            self.close()
            self.model.train(was_training)
        return table.drop(columns="step").reset_index(drop=True)

    # ------------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Remove every hook and drop the weight snapshots; recorded values stay readable.

        Under a process group it is collective when the unfinished step is recorded: call it
        on every rank, before destroying the process group.
        """
        if self._closed:
            return
        recorded = self._recording
        if self._recording:
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
