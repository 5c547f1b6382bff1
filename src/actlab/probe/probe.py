"""``Probe``: measure what activations do inside any model while it trains.

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
from actlab.probe.columns import COLUMNS
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


@dataclass
class _Site:
    name: str
    module: nn.Module
    bounds: tuple[float, float] | None
    fwd: list[tuple[torch.Tensor, int, int]] = field(default_factory=list)
    bwd: list[tuple[torch.Tensor, int, int, int]] = field(default_factory=list)
    hist: torch.Tensor | None = None
    pending: torch.Tensor | None = None  # input of an in-place site, read before the call


@dataclass
class _Weight:
    name: str
    param: nn.Parameter
    w0: torch.Tensor
    w_prev: torch.Tensor
    std0: torch.Tensor
    grad: torch.Tensor | None = None


@dataclass
class _Block:
    name: str
    module: nn.Module
    fwd: list[tuple[torch.Tensor, int]] = field(default_factory=list)


class Probe:
    """Record activation, gradient, weight and hidden-state statistics of ``model`` in training.

    Args:
        model: any ``nn.Module``; it is never modified (hooks only, removed by :meth:`close`).
        every: schedule: an int N (steps 0, N, 2N, ...), ``"log"``/``"log:<per_decade>"``,
            a list of steps, or a :class:`~actlab.probe.schedule.Schedule`.
        activations: sites to probe: ``None`` finds them (:func:`actlab.find_activations`);
            names or glob patterns of any submodules, a predicate ``(name, module) -> bool``,
            or ``False`` for none.
        blocks: residual blocks (modules or names) whose output mean is ``hidden_mean``.
        metrics: names from :data:`actlab.probe.metrics.ALL_METRICS` (default: all).
        weights: Linear/conv layers whose ``.weight`` is tracked: ``None`` = all, names,
            patterns or a predicate, ``False`` = none. Keeps two copies of each (initial and
            previously recorded) on the weight's device.
        eps: threshold of ``sparsity`` (``|a| < eps``) and of ``dead_units``.
        saturation_tol: distance to an output bound counted as saturated.
        histograms: number of fixed bins for pre-/post-activation histograms (``None``: off).
        hist_range: ``(low, high)`` of the histogram bins; values outside go to the edge bins.
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

        named = dict(model.named_modules())
        self.sites = [_Site(n, m, activation_bounds(m)) for n, m in
                      self._resolve_sites(model, named, activations).items()]
        self.blocks = [_Block(n, m) for n, m in self._resolve_blocks(named, blocks).items()]
        self.weights = self._snapshot_weights(named, weights)

        wanted = set(self.metrics)
        self._want_fwd = bool(wanted & set(M.ACT_FORWARD))
        self._want_bwd = bool(wanted & set(M.ACT_BACKWARD))
        self._want_cov = "preact_grad_cov" in wanted
        self._want_wstate = bool(wanted & set(M.WEIGHT_STATE))
        self._want_wgrad = bool(wanted & set(M.WEIGHT_GRAD))
        self._want_blocks = "hidden_mean" in wanted

        self._step = 0
        self._handles: list[Any] = []
        self._attached = False
        self._paused = False
        self._closed = False
        self._last_linear: tuple[torch.Tensor, torch.Tensor, nn.Module] | None = None
        # Linear layers that fed a site (learned in the first recorded step; later steps hook
        # only these instead of every Linear)
        self._feeders: dict[int, nn.Module] = {}
        self._feeders_known = False
        self._saw_site = False
        self._buffers: dict[tuple[torch.dtype, torch.device], torch.Tensor] = {}
        self._records: list[tuple] = []  # device-side, not yet read
        self._rows: list[tuple[int, str, str, float]] = []  # host-side
        self._hist_rows: list[tuple[int, str, str, np.ndarray]] = []
        self._written: dict[int, int] = {}

        if self.schedule.due(0):
            self._attach()
            self._record_weights(0)

    # ------------------------------------------------------------------ construction helpers
    @staticmethod
    def _check_metrics(metrics: Iterable[str] | None) -> tuple[str, ...]:
        if metrics is None:
            return M.ALL_METRICS
        chosen = (metrics,) if isinstance(metrics, str) else tuple(metrics)
        for name in chosen:
            if name not in M.ALL_METRICS:
                raise ValueError(f"unknown metric {name!r}; closest: "
                                 f"{closest_names(name, M.ALL_METRICS)}")
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
        wanted = set(self.metrics) & set(M.WEIGHT_STATE + M.WEIGHT_GRAD)
        if weights is False or not wanted:
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
                    add(site.module.register_forward_hook(self._make_post_hook(site, None)))
                else:
                    add(site.module.register_forward_hook(self._make_site_hook(site)))
            if self._want_cov:
                dense = (self._feeders.values() if self._feeders_known
                         else [m for m in self.model.modules() if _is_dense(m)])
                for module in dense:
                    add(module.register_forward_hook(self._linear_hook))
        if self._want_blocks:
            for block in self.blocks:
                add(block.module.register_forward_hook(self._make_block_hook(block)))
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

    def _feeding_rows(self, p: torch.Tensor) -> tuple[torch.Tensor | None, int]:
        """Row sums of the input of the Linear whose output *is* ``p`` (same tensor object)."""
        self._saw_site = True  # a backward-tracked site pass happened: feeders can be learned
        last = self._last_linear
        if not self._want_cov or last is None or last[0] is not p:
            return None, 0
        x = last[1]
        self._feeders[id(last[2])] = last[2]
        return M.input_row_sums(x), x.shape[-1]

    def _observe(self, site: _Site, p: torch.Tensor, a: torch.Tensor | None) -> None:
        if a is None:
            return
        if self._want_fwd:
            raw = M.forward_raw(p, a, self.eps, site.bounds, self.saturation_tol,
                                self._scratch(max(p.numel(), a.numel()), p))
            site.fwd.append((raw, p.numel(), a.numel()))
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

    def _register_grad(self, site: _Site, p: torch.Tensor) -> None:
        if not (self._want_bwd and p.requires_grad and torch.is_grad_enabled()):
            return
        x_rows, d_in = self._feeding_rows(p)
        fan = p.shape[-1] * d_in if x_rows is not None else 0
        rows = p.numel() // max(p.shape[-1], 1) if p.dim() else 1

        def on_grad(g: torch.Tensor) -> None:
            if not self._closed:
                site.bwd.append((M.backward_raw(g, x_rows), g.numel(), rows, fan))

        p.register_hook(on_grad)

    def _make_site_hook(self, site: _Site) -> Callable:
        def hook(module: nn.Module, inputs: tuple, output: Any) -> None:
            if self._paused or not inputs or not isinstance(inputs[0], torch.Tensor):
                return
            p = inputs[0]
            a = output if isinstance(output, torch.Tensor) else None
            self._observe(site, p, a)
            self._register_grad(site, p)
        return hook

    def _make_pre_hook(self, site: _Site) -> Callable:
        def hook(module: nn.Module, inputs: tuple) -> None:
            if self._paused or not inputs or not isinstance(inputs[0], torch.Tensor):
                return
            p = inputs[0]
            # keep a copy of p's moments: the in-place call is about to overwrite p
            site.pending = p.detach().clone()
            self._register_grad(site, p)
        return hook

    def _make_post_hook(self, site: _Site, _: None) -> Callable:
        def hook(module: nn.Module, inputs: tuple, output: Any) -> None:
            p = site.pending
            if self._paused or p is None or not isinstance(output, torch.Tensor):
                return
            site.pending = None
            self._observe(site, p, output)
        return hook

    def _make_block_hook(self, block: _Block) -> Callable:
        def hook(module: nn.Module, inputs: tuple, output: Any) -> None:
            h = _first_tensor(output)
            if self._paused or h is None:
                return
            block.fwd.append((M._stat_dtype(h.detach()).sum(), h.numel()))
        return hook

    def _make_grad_hook(self, weight: _Weight) -> Callable:
        def hook(param: torch.Tensor) -> None:
            # the last call of a step sees the fully accumulated gradient
            if not self._closed and param.grad is not None:
                weight.grad = M.grad_raw(param.grad)
        return hook

    # ------------------------------------------------------------------ stepping
    def _record_weights(self, step: int) -> None:
        if not self._want_wstate:
            return
        with torch.no_grad():
            for weight in self.weights:
                raw = M.weight_raw_(weight.param, weight.w0, weight.w_prev, weight.std0)
                self._records.append(("weight", step, weight.name, [raw], weight.w0.numel()))

    def _close_step(self, step: int) -> None:
        # Only list moves here: stacking and conversion wait for flush(), off the hot path.
        for site in self.sites:
            if site.fwd:
                self._records.append(("fwd", step, site.name, [r for r, _, _ in site.fwd],
                                      site.fwd, site.bounds is not None))
                site.fwd = []
            if site.bwd:
                self._records.append(("bwd", step, site.name, [r for r, *_ in site.bwd], site.bwd))
                site.bwd = []
            if site.hist is not None:
                self._records.append(("hist", step, site.name, [site.hist]))
                site.hist = None
        for block in self.blocks:
            if block.fwd:
                self._records.append(("block", step, block.name, [r for r, _ in block.fwd],
                                      block.fwd))
                block.fwd = []
        for weight in self.weights:
            if weight.grad is not None:
                self._records.append(("grad", step, weight.name, [weight.grad], weight.w0.numel()))
                weight.grad = None
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
        for rec in self._records:
            kind, step, name, parts = rec[0], rec[1], rec[2], rec[3]
            values = np.stack(host[cursor:cursor + len(parts)])
            cursor += len(parts)
            if kind == "fwd":
                n_pre = np.array([n for _, n, _ in rec[4]], dtype=np.float64)
                n_post = np.array([n for _, _, n in rec[4]], dtype=np.float64)
                out = M.combine_forward(values, n_pre, n_post, rec[5])
            elif kind == "bwd":
                info = np.array([[n, rows, fan] for _, n, rows, fan in rec[4]], dtype=np.float64)
                has_cov = bool((info[:, 2] > 0).all())
                out = M.combine_backward(values, info[:, 0], info[:, 1],
                                         info[:, 2] if has_cov else None)
            elif kind == "block":
                n = np.array([n for _, n in rec[4]], dtype=np.float64)
                out = {"hidden_mean": float(values.sum() / n.sum())}
            elif kind == "weight":
                out = M.combine_weight(values[0], rec[4])
            elif kind == "grad":
                out = M.combine_grad(values[0], rec[4])
            else:  # hist
                self._hist_rows.append((step, name, "pre", values[0][0].copy()))
                self._hist_rows.append((step, name, "post", values[0][1].copy()))
                continue
            self._rows.extend((step, name, metric, value) for metric, value in out.items()
                              if metric in wanted)
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

        Exact: a per-unit "ever active" mask is OR-ed over all batches on the device. Beside it,
        ``dead_frac_per_batch`` is the mean over batches of the share of units inactive on that
        batch alone, the estimate one mini-batch would give (never below the exact value).
        A unit is a feature of the last dimension, or a channel (dim 1) when the last weight
        layer before the site is a convolution. Runs under ``torch.no_grad()`` and does not
        switch train/eval mode: call ``model.eval()`` first if you want inference behaviour.
        ``forward(batch)`` runs the model; by default dict batches are passed as keywords,
        tuples/lists by their first element, tensors as they are (moved to the model's device).

        Returns a DataFrame with columns layer, units, dead_frac, dead_frac_per_batch, batches.
        """
        state: dict[str, dict[str, Any]] = {s.name: {} for s in self.sites}
        last_conv = [False]
        handles = []

        def track(module: nn.Module, inputs: tuple, output: Any) -> None:
            last_conv[0] = isinstance(module, _CONV)

        def make(site: _Site) -> Callable:
            def hook(module: nn.Module, inputs: tuple, output: Any) -> None:
                if not isinstance(output, torch.Tensor):
                    return
                a = output.detach()
                dim = 1 if last_conv[0] and a.dim() >= 3 else -1
                active = (a.abs() > self.eps).movedim(dim, -1).reshape(-1, a.shape[dim]).any(0)
                st = state[site.name]
                if "ever" not in st:
                    st["ever"] = torch.zeros_like(active)
                    st["per_batch"] = torch.zeros((), dtype=torch.float64, device=a.device)
                    st["hits"] = 0
                st["ever"] |= active
                st["per_batch"] += (~active).sum().to(torch.float64) / active.numel()
                st["hits"] += 1
            return hook

        for module in self.model.modules():
            if _is_weight_layer(module):
                handles.append(module.register_forward_hook(track))
        for site in self.sites:
            handles.append(site.module.register_forward_hook(make(site)))
        self._paused = True
        batches = 0
        try:
            with torch.no_grad():
                for batch in loader:
                    last_conv[0] = False
                    (forward or self._default_forward)(batch)
                    batches += 1
        finally:
            self._paused = False
            for handle in handles:
                handle.remove()
        rows = []
        for site in self.sites:
            st = state[site.name]
            if "ever" not in st:
                continue
            ever = st["ever"]
            rows.append({
                "layer": site.name,
                "units": int(ever.numel()),
                "dead_frac": float((~ever).sum()) / ever.numel(),
                "dead_frac_per_batch": float(st["per_batch"]) / st["hits"],
                "batches": batches,
            })
        return pd.DataFrame(rows, columns=["layer", "units", "dead_frac", "dead_frac_per_batch",
                                           "batches"])

    def _default_forward(self, batch: Any) -> Any:
        param = next(self.model.parameters(), None)
        device = param.device if param is not None else None

        def move(x: Any) -> Any:
            return x.to(device) if isinstance(x, torch.Tensor) and device is not None else x

        if isinstance(batch, Mapping):
            return self.model(**{k: move(v) for k, v in batch.items()})
        if isinstance(batch, (list, tuple)):
            return self.model(move(batch[0]))
        return self.model(move(batch))

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
