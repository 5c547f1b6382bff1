"""The built-in metric families (definitions in :mod:`actlab.probe.metrics` and docs/probe.md)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch

from actlab.probe import metrics as M
from actlab.probe.collectors.base import Collector
from actlab.probe.distributed import local
from actlab.probe.merge import Stat, Stats


def _tap_rows(where: Any, records: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The passes in GradTap carrier gradients (one ``(slots, 8)`` record per backward):
    ``backward_raw`` rows and their ``(numel, rows, fan)``. A row that several passes wrote
    (more forward calls before one backward than a carrier keeps apart) is dropped."""
    rows = np.concatenate([np.asarray(r).reshape(-1, 8) for r in records])
    merged = rows[:, 0] > 1
    if merged.any():
        warnings.warn(f"probe: {int(merged.sum())} backward record(s) of {where.name} summed "
                      f"several forward calls of a compiled model; their gradient statistics "
                      f"are left out (run one backward per forward call)", stacklevel=2)
    used = rows[rows[:, 0] == 1]
    return used[:, 4:], used[:, 1:4]


class ActivationForward(Collector):
    """Moments, sparsity, extremes (with the location of ``max |a|``), non-finite counts and
    saturation of an activation site's input and output."""

    metrics = M.ACT_FORWARD
    target = "site"

    def observe(self, where: Any, p: torch.Tensor, a: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """:func:`~actlab.probe.metrics.forward_raw` into the site's scratch buffer."""
        scratch = where.scratch(max(p.numel(), a.numel()), p)
        raw = M.forward_raw(p, a, where.eps, where.bounds, where.tol, scratch)
        return raw, (p.numel(), a.numel(), a.shape[-1] if a.dim() else 1)

    def stats(self, where: Any, raw: np.ndarray, meta: list[Any]) -> Stats:
        """:func:`~actlab.probe.metrics.forward_stats` over the passes."""
        counts = np.asarray(meta, dtype=np.float64)
        return M.forward_stats(raw, counts[:, 0], counts[:, 1], counts[:, 2])

    def finish(self, where: Any, stats: Stats) -> dict[str, float]:
        """:func:`~actlab.probe.metrics.forward_metrics`."""
        return M.forward_metrics(stats, where.bounds is not None)


class ActivationKurtosis(Collector):
    """Non-excess kurtosis ``n m4 / m2^2`` of a site's input and output (opt-in: several
    more passes over each tensor); the fourth moments merge by Pébay's formulas."""

    metrics = M.ACT_KURTOSIS
    target = "site"

    def observe(self, where: Any, p: torch.Tensor, a: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """:func:`~actlab.probe.metrics.kurtosis_raw`; element counts as metadata."""
        return M.kurtosis_raw(p, a), (p.numel(), a.numel())

    def stats(self, where: Any, raw: np.ndarray, meta: list[Any]) -> Stats:
        """:func:`~actlab.probe.metrics.kurtosis_stats` over the passes."""
        counts = np.asarray(meta, dtype=np.float64)
        return M.kurtosis_stats(raw, counts[:, 0], counts[:, 1])

    def finish(self, where: Any, stats: Stats) -> dict[str, float]:
        """:func:`~actlab.probe.metrics.kurtosis_metrics`."""
        return M.kurtosis_metrics(stats)


class ActivationOutputGrad(Collector):
    """RMS, largest magnitude and non-finite count of ``dL/da`` at a site's output (opt-in;
    eager models only: under ``torch.compile`` it is left out with a warning)."""

    metrics = M.ACT_OUTPUT_GRAD
    target = "outgrad"

    def observe(self, where: Any, h: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """:func:`~actlab.probe.metrics.output_grad_raw`; the element count as metadata."""
        return M.output_grad_raw(h), h.numel()

    def stats(self, where: Any, raw: np.ndarray, meta: list[Any]) -> Stats:
        """:func:`~actlab.probe.metrics.output_grad_stats` (``h`` scaled by
        ``where.grad_scale``)."""
        return M.output_grad_stats(raw, np.asarray(meta, dtype=np.float64),
                                   getattr(where, "grad_scale", 1.0))

    def finish(self, where: Any, stats: Stats) -> dict[str, float]:
        """:func:`~actlab.probe.metrics.output_grad_metrics`."""
        return M.output_grad_metrics(stats)


class DeadUnits(Collector):
    """Units never active (``|a| > eps``) over all passes of a step, and the one-batch estimate.

    ``dead_frac``: share of units inactive on every pass (an "ever active" mask OR-ed over
    passes); ``dead_frac_per_batch``: mean over passes of the share inactive on that pass;
    ``n_units``: units of the site. Across ranks a pass is the global batch's pass: the
    per-pass masks (passes x units) merge by max, i.e. a unit is active on a global pass
    when it is active on that pass of any rank. A unit is a feature of the last dimension, or a channel
    (dim 1) when the last weight layer run before the site is a convolution.
    """

    metrics = ("dead_frac", "dead_frac_per_batch", "n_units")
    target = "site"
    needs_layer_kind = True

    def observe(self, where: Any, p: torch.Tensor, a: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """Per-unit 0/1 vector: active somewhere in this pass."""
        a = a.detach()
        dim = 1 if where.after_conv and a.dim() >= 3 else -1
        active = (a.abs() > where.eps).movedim(dim, -1).reshape(-1, a.shape[dim]).any(0)
        return active.to(M.stat_dtype(a.dtype)), None

    def stats(self, where: Any, raw: np.ndarray, meta: list[Any]) -> Stats:
        """The per-pass activity masks (passes x units), merged by max."""
        return {"active": Stat("max", raw)}

    def finish(self, where: Any, stats: Stats) -> dict[str, float]:
        """Exact share over the passes, mean one-pass share, and the unit count."""
        active = stats["active"].value
        ever = active.max(axis=0) > 0
        return {"dead_frac": float(1.0 - ever.mean()),
                "dead_frac_per_batch": float((1.0 - active.mean(axis=1)).mean()),
                "n_units": float(active.shape[1])}


class ActivationBackward(Collector):
    """Mean of ``dL/dp`` at a site and the covariance term of the drift analysis."""

    metrics = M.ACT_BACKWARD
    target = "grad"

    def observe(self, where: Any, g: torch.Tensor, x_rows: torch.Tensor | None,
                fan: int) -> tuple[torch.Tensor, Any]:
        """:func:`~actlab.probe.metrics.backward_raw`; rows and fan as metadata."""
        rows = g.numel() // max(g.shape[-1], 1) if g.dim() else 1
        return M.backward_raw(g, x_rows), (g.numel(), rows, fan)

    def stats(self, where: Any, raw: np.ndarray, meta: list[Any]) -> Stats:
        """:func:`~actlab.probe.metrics.backward_stats` (``g`` scaled by ``where.grad_scale``);
        the covariance only if every pass had a feeding Linear."""
        if meta and meta[0] is None:  # GradTap records (compiled models): rows carry the meta
            raw, meta = _tap_rows(where, raw)
        info = np.asarray(meta, dtype=np.float64).reshape(-1, 3)
        has_cov = bool((info[:, 2] > 0).all())
        return M.backward_stats(raw, info[:, 0], info[:, 1], info[:, 2] if has_cov else None,
                                getattr(where, "grad_scale", 1.0))

    def finish(self, where: Any, stats: Stats) -> dict[str, float]:
        """:func:`~actlab.probe.metrics.backward_metrics`."""
        return M.backward_metrics(stats)


class HiddenMean(Collector):
    """Mean of a block's output over elements and passes."""

    metrics = M.BLOCK
    target = "block"

    def observe(self, where: Any, h: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """Sum of the block's output."""
        return M._stat_dtype(h.detach()).sum(), h.numel()

    def stats(self, where: Any, raw: np.ndarray, meta: list[Any]) -> Stats:
        """Sum and element count (summed)."""
        return {"sum": Stat("sum", [raw.sum(), float(sum(meta))])}

    def finish(self, where: Any, stats: Stats) -> dict[str, float]:
        """Pooled mean."""
        total, count = stats["sum"].value
        return {"hidden_mean": float(total / count)}


class MassiveActivation(Collector):
    """Massive activations of the residual stream after a block (Sun et al., 2024).

    ``hidden_absmax``: largest ``|h|`` over all passes; ``hidden_absmedian``: median of
    ``|h|`` over the elements of a pass, then the median over passes (exact for one pass);
    ``massive_ratio = hidden_absmax / hidden_absmedian``.

    A median does not merge from a summary, so across ranks it is defined on the global
    batch: when ``where.global_batch`` is set (the probe runs under a process group), each
    pass keeps ``|h|`` of its elements, the ranks' values of a pass are concatenated (one
    all-gather) and the median is taken over them, as one process seeing the global batch
    would. That moves every block output of a recorded step to the host: list only the
    blocks you need.
    """

    metrics = ("massive_ratio", "hidden_absmax", "hidden_absmedian")
    target = "block"

    def observe(self, where: Any, h: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """``[max |h|, median |h|]`` of one pass (``|h|`` itself for the global batch)."""
        mag = M._stat_dtype(h.detach()).abs().reshape(-1)
        if getattr(where, "global_batch", False):
            return mag.clone(), None
        return torch.stack([mag.max(), mag.median()]), None

    def stats(self, where: Any, raw: np.ndarray, meta: list[Any]) -> Stats:
        """The largest magnitude (max) and per-pass medians, or per-pass ``|h|`` (concat)."""
        if getattr(where, "global_batch", False):
            out: Stats = {"max": Stat("max", [max(float(row.max()) for row in raw)])}
            out.update({f"pass{i}": Stat("concat", row) for i, row in enumerate(raw)})
            return out
        return {"max": Stat("max", raw[:, 0].max(keepdims=True)),
                "medians": Stat("concat", raw[:, 1])}

    def finish(self, where: Any, stats: Stats) -> dict[str, float]:
        """Largest magnitude over the median magnitude."""
        top = float(stats["max"].value[0])
        if "medians" in stats:
            medians = stats["medians"].value
        else:
            medians = np.array([_lower_median(s.value) for name, s in stats.items()
                                if name != "max"])
        median = float(np.median(medians))
        ratio = top / median if median > 0 else float("inf")
        return {"massive_ratio": ratio, "hidden_absmax": top, "hidden_absmedian": median}


def _lower_median(values: np.ndarray) -> float:
    """``torch.median``'s median: the lower of the two middle values for an even count."""
    return float(np.partition(values, (values.size - 1) // 2)[(values.size - 1) // 2])


class InputRange(Collector):
    """Range ``r = max - min`` of a module's input (an MLP's down-projection input)."""

    metrics = ("down_input_range",)
    target = "input"

    def observe(self, where: Any, x: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """``[max x, min x]`` of one pass."""
        low, high = torch.aminmax(M._stat_dtype(x.detach()))
        return torch.stack([high, low]), None

    def stats(self, where: Any, raw: np.ndarray, meta: list[Any]) -> Stats:
        """Pooled max and min."""
        return {"max": Stat("max", raw[:, 0].max(keepdims=True)),
                "min": Stat("min", raw[:, 1].min(keepdims=True))}

    def finish(self, where: Any, stats: Stats) -> dict[str, float]:
        """Pooled max minus pooled min."""
        return {"down_input_range": float(stats["max"].value[0] - stats["min"].value[0])}


class InputRowSum(Collector):
    """Mean over rows (tokens, samples) of a module's input summed over its last dimension: what
    a uniform shift ``c`` of a Linear's weights adds to its mean output is ``c`` times this."""

    metrics = ("input_row_sum",)
    target = "input"

    def observe(self, where: Any, x: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """Sum of every element of one pass (in float64: behind a LayerNorm the rows nearly
        cancel) and its row count."""
        return x.detach().double().sum(), x.numel() // max(x.shape[-1], 1)

    def stats(self, where: Any, raw: np.ndarray, meta: list[Any]) -> Stats:
        """Sum and row count (summed)."""
        return {"sum": Stat("sum", [raw.sum(), float(sum(meta))])}

    def finish(self, where: Any, stats: Stats) -> dict[str, float]:
        """Pooled mean row sum."""
        total, rows = stats["sum"].value
        return {"input_row_sum": float(total / rows)}


class WeightState(Collector):
    """Moments of a weight and its drift from its initial and previously recorded values."""

    metrics = M.WEIGHT_STATE
    target = "weight"

    def observe(self, where: Any, param: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        """:func:`~actlab.probe.metrics.weight_raw_` of the local shard (updates
        ``state.w_prev``)."""
        return M.weight_raw_(local(param), state.w0, state.w_prev, state.m0), state.w0.numel()

    def stats(self, where: Any, raw: np.ndarray, meta: list[Any]) -> Stats:
        """:func:`~actlab.probe.metrics.weight_stats` of the step's one record."""
        return M.weight_stats(raw[-1], meta[-1])

    def finish(self, where: Any, stats: Stats) -> dict[str, float]:
        """:func:`~actlab.probe.metrics.weight_metrics`."""
        return M.weight_metrics(stats)


class WeightGrad(Collector):
    """Norm and mean of the gradient a weight accumulated in the recorded step."""

    metrics = M.WEIGHT_GRAD
    target = "wgrad"

    def observe(self, where: Any, grad: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """:func:`~actlab.probe.metrics.grad_raw` of the local shard."""
        grad = local(grad)
        return M.grad_raw(grad), grad.numel()

    def stats(self, where: Any, raw: np.ndarray, meta: list[Any]) -> Stats:
        """:func:`~actlab.probe.metrics.grad_stats` of the last (fully accumulated) record."""
        return M.grad_stats(raw[-1], meta[-1])

    def finish(self, where: Any, stats: Stats) -> dict[str, float]:
        """:func:`~actlab.probe.metrics.grad_metrics`."""
        return M.grad_metrics(stats)


BUILTIN: tuple[Collector, ...] = (ActivationForward(), ActivationBackward(), WeightState(),
                                  WeightGrad(), HiddenMean(), DeadUnits(), MassiveActivation(),
                                  InputRange(), InputRowSum(), ActivationKurtosis(),
                                  ActivationOutputGrad())
