"""``Probe``: measure what activations do inside any model while it trains.

``Probe`` owns the schedule, the hooks' lifecycle and the transfer to the host; the
arithmetic of each metric family lives in its collector (:mod:`actlab.probe.collectors`),
which is how :func:`actlab.register_metric` adds a metric without touching this file.

How it stays cheap:

* hooks exist only during recorded steps: they are registered when a recorded step begins
  and removed when it ends, so unrecorded steps run the bare model;
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

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn

from actlab.errors import ConfigError
from actlab.probe import metrics as M
from actlab.probe.collectors import Collector, collectors_for
from actlab.probe.columns import COLUMNS
from actlab.probe.forward import default_forward
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


@dataclass(eq=False)
class _Weight:
    name: str
    param: nn.Parameter
    w0: torch.Tensor
    w_prev: torch.Tensor
    std0: torch.Tensor
    passes: _Passes = field(default_factory=dict)


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
        metrics: metric names (default: :data:`actlab.probe.metrics.ALL_METRICS`); any name
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

        collectors = collectors_for(self.metrics)
        self._by_target: dict[str, list[Collector]] = {}
        for collector in collectors:
            self._by_target.setdefault(collector.target, []).append(collector)

        named = dict(model.named_modules())
        self.sites = [self._where(n, m, activation_bounds(m)) for n, m in
                      self._resolve_sites(model, named, activations).items()]
        self.blocks = [self._where(n, m) for n, m in self._resolve_blocks(named, blocks).items()]
        self.inputs = [self._where(n, m) for n, m in self._resolve_blocks(named, inputs).items()]
        self.weights = self._snapshot_weights(named, weights)

        self._site_collectors = self._by_target.get("site", [])
        self._grad_collectors = self._by_target.get("grad", [])
        self._want_fwd = bool(self._site_collectors)
        self._want_bwd = bool(self._grad_collectors)
        self._want_cov = "preact_grad_cov" in self.metrics
        self._want_kind = any(c.needs_layer_kind for c in collectors)
        self._want_wstate = "weight" in self._by_target
        self._want_wgrad = "wgrad" in self._by_target
        self._want_blocks = "block" in self._by_target
        self._want_inputs = "input" in self._by_target

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
        self._written: dict[int, int] = {}

        if self.schedule.due(0):
            self._attach()
            self._record_weights(0)

    # ------------------------------------------------------------------ construction helpers
    def _where(self, name: str, module: nn.Module,
               bounds: tuple[float, float] | None = None) -> _Where:
        return _Where(name, module, bounds, self.eps, self.saturation_tol, self._scratch)

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
            return find_activations(model)
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
            w0 = M._stat_dtype(param.detach()).clone().contiguous()
            std0 = w0.std(correction=0)
            out.append(_Weight(name, param, w0, w0.clone(), std0))
        return out

    # ------------------------------------------------------------------ hooks
    def _attach(self) -> None:
        add = self._handles.append
        if self._want_fwd or self._want_bwd or self.hist_bins is not None:
            for site in self.sites:
                if getattr(site.module, "inplace", False):
                    # an in-place activation overwrites its input: read it before the call
                    add(site.module.register_forward_pre_hook(self._make_pre_hook(site)))
                    add(site.module.register_forward_hook(self._make_post_hook(site)))
                else:
                    add(site.module.register_forward_hook(self._make_site_hook(site)))
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
        if self._want_wgrad:
            for weight in self.weights:
                if weight.param.requires_grad:
                    add(weight.param.register_post_accumulate_grad_hook(self._make_grad_hook(weight)))
        self._attached = True

    def _detach(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._last_linear = None
        self._buffers.clear()
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
        self._feeders[id(last[2])] = last[2]
        return M.input_row_sums(x), x.shape[-1]

    @staticmethod
    def _observe_into(where: _Where | _Weight, collectors: list[Collector], *tensors: Any) -> None:
        for collector in collectors:
            where.passes.setdefault(collector, []).append(collector.observe(where, *tensors))

    def _observe(self, site: _Where, p: torch.Tensor, a: torch.Tensor | None) -> None:
        if a is None:
            return
        site.after_conv = self._last_conv
        self._observe_into(site, self._site_collectors, p, a)
        if self.hist_bins is not None:
            low, high = self.hist_range
            counts = torch.stack([M.histogram_raw(p, self.hist_bins, low, high),
                                  M.histogram_raw(a, self.hist_bins, low, high)])
            site.hist = counts if site.hist is None else site.hist + counts

    def _scratch(self, numel: int, like: torch.Tensor) -> torch.Tensor:
        """A reusable flat buffer (one per dtype and device, grown as needed)."""
        dtype = M.stat_dtype(like.dtype)
        key = (dtype, like.device)
        buf = self._buffers.get(key)
        if buf is None or buf.numel() < numel:
            buf = torch.empty(numel, dtype=dtype, device=like.device)
            self._buffers[key] = buf
        return buf

    def _register_grad(self, site: _Where, p: torch.Tensor) -> None:
        if not (self._want_bwd and p.requires_grad and torch.is_grad_enabled()):
            return
        x_rows, d_in = self._feeding_rows(p)
        fan = p.shape[-1] * d_in if x_rows is not None else 0
        collectors = self._grad_collectors

        def on_grad(g: torch.Tensor) -> None:
            if not self._closed:
                self._observe_into(site, collectors, g, x_rows, fan)

        p.register_hook(on_grad)

    def _make_site_hook(self, site: _Where) -> Callable:
        def hook(module: nn.Module, inputs: tuple, output: Any) -> None:
            if self._paused or not inputs or not isinstance(inputs[0], torch.Tensor):
                return
            p = inputs[0]
            a = output if isinstance(output, torch.Tensor) else None
            self._observe(site, p, a)
            self._register_grad(site, p)
        return hook

    def _make_pre_hook(self, site: _Where) -> Callable:
        def hook(module: nn.Module, inputs: tuple) -> None:
            if self._paused or not inputs or not isinstance(inputs[0], torch.Tensor):
                return
            p = inputs[0]
            # keep a copy of p's moments: the in-place call is about to overwrite p
            site.pending = p.detach().clone()
            self._register_grad(site, p)
        return hook

    def _make_post_hook(self, site: _Where) -> Callable:
        def hook(module: nn.Module, inputs: tuple, output: Any) -> None:
            p = site.pending
            if self._paused or p is None or not isinstance(output, torch.Tensor):
                return
            site.pending = None
            self._observe(site, p, output)
        return hook

    def _make_block_hook(self, block: _Where) -> Callable:
        collectors = self._by_target.get("block", [])

        def hook(module: nn.Module, inputs: tuple, output: Any) -> None:
            h = _first_tensor(output)
            if not self._paused and h is not None:
                self._observe_into(block, collectors, h)
        return hook

    def _make_input_hook(self, where: _Where) -> Callable:
        collectors = self._by_target.get("input", [])

        def hook(module: nn.Module, inputs: tuple, output: Any) -> None:
            if not self._paused and inputs and isinstance(inputs[0], torch.Tensor):
                self._observe_into(where, collectors, inputs[0])
        return hook

    def _make_grad_hook(self, weight: _Weight) -> Callable:
        collectors = self._by_target.get("wgrad", [])

        def hook(param: torch.Tensor) -> None:
            # the last call of a step sees the fully accumulated gradient: it replaces the others
            if not self._closed and param.grad is not None:
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

    def _close_step(self, step: int) -> None:
        # Only list moves here: stacking and conversion wait for flush(), off the hot path.
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
        """Close the current training step (call it after ``optimizer.step()``)."""
        if self._closed:
            raise RuntimeError("Probe.step() after close()")
        if self._attached:
            self._close_step(self._step)
            if self._want_cov and not self._feeders_known and self._saw_site:
                self._feeders_known = True
                self._detach()  # re-attached below, hooking only the learned feeders
        self._step += 1
        due = self.schedule.due(self._step)
        if due and not self._attached:
            self._attach()
        elif not due and self._attached:
            self._detach()
        if due:
            self._record_weights(self._step)

    @property
    def current_step(self) -> int:
        """The 0-based index of the training step now running."""
        return self._step

    # ------------------------------------------------------------------ reading
    def flush(self) -> None:
        """Move pending device-side records to the host (one transfer per device)."""
        if not self._records:
            return
        tensors = [t for rec in self._records for t in rec[3]]
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
        wanted = set(self.metrics)
        cursor = 0
        for collector, step, where, parts, metas in self._records:
            values = np.stack(host[cursor:cursor + len(parts)])
            cursor += len(parts)
            if collector is None:  # histogram counts: pre and post
                self._hist_rows.append((step, where.name, "pre", values[0][0].copy()))
                self._hist_rows.append((step, where.name, "post", values[0][1].copy()))
                continue
            out = collector.combine(where, values, metas)
            self._rows.extend((step, where.name, metric, float(value))
                              for metric, value in out.items() if metric in wanted)
        self._records.clear()

    def table(self) -> pd.DataFrame:
        """All recorded values as a tidy DataFrame with columns step, layer, metric, value."""
        self.flush()
        df = pd.DataFrame(self._rows, columns=COLUMNS)
        return df.astype({"step": "int64", "value": "float64"})

    def histograms(self) -> pd.DataFrame:
        """Recorded histograms: columns step, layer, kind (pre/post), bin_left, bin_right, count."""
        self.flush()
        if self.hist_bins is None:
            raise ValueError("no histograms: create the Probe with histograms=<bins>")
        edges = np.linspace(*self.hist_range, self.hist_bins + 1)
        frames = [pd.DataFrame({"step": step, "layer": name, "kind": kind,
                                "bin_left": edges[:-1], "bin_right": edges[1:], "count": counts})
                  for step, name, kind, counts in self._hist_rows]
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

    def _default_forward(self, batch: Any) -> Any:
        return default_forward(self.model, batch)

    # ------------------------------------------------------------------ writers
    def write(self, writer: Any) -> int:
        """Send the rows not yet sent to ``writer`` (anything with ``write(df)``, e.g.
        :class:`~actlab.probe.writers.TensorBoardWriter`); returns how many were sent."""
        df = self.table()
        start = self._written.get(id(writer), 0)
        new = df.iloc[start:]
        if len(new):
            writer.write(new)
        self._written[id(writer)] = len(df)
        return len(new)

    def to_csv(self, path: Any) -> None:
        """Write the table as CSV."""
        from actlab.probe.writers import write_csv

        write_csv(self.table(), path)

    def to_parquet(self, path: Any) -> None:
        """Write the table as Parquet (needs pyarrow: ``pip install actlab[parquet]``)."""
        from actlab.probe.writers import write_parquet

        write_parquet(self.table(), path)

    # ------------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Remove every hook and drop the weight snapshots; recorded values stay readable."""
        if self._closed:
            return
        if self._attached:
            self._close_step(self._step)
        self._detach()
        self.flush()
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
_BACKWARD_TARGETS = ("grad", "wgrad")


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
    probe = Probe(model, every=[0], activations=activations, blocks=blocks, metrics=chosen,
                  eps=eps, saturation_tol=saturation_tol, inputs=modules)
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
