"""Profile any model: per-MLP and per-block activation statistics on a set of inputs.

::

    result = actlab.profile_model(model, batches)  # batches: an iterable of model inputs
    result.table()                                  # tidy frame: layer, metric, value
    result.write("profile/")                        # report.html and summary.json

Per MLP site (the activation module; for a gated MLP ``act(gate)``):

* ``act_mean``: activation bias, the mean of the activation output;
* ``preact_neg_frac``: share of negative pre-activations, what a ReLU would zero
  ("ReLUfication readiness");
* ``sparsity``: share of outputs with ``|a| < 1e-7``;
* ``saturation_frac``: as the probe's (bounded activations only);
* ``dead_frac``: share of units with ``|a| < 1e-7`` on every input;
* ``down_input_range``: ``r = max - min`` of the down-projection's input (``act(gate) * up``
  for a gated MLP), reported under the site's name.

Per block (transformer layer): ``massive_ratio``, the largest ``|h|`` of the residual stream
after the block over its median ``|h|`` (with ``hidden_absmax`` and ``hidden_absmedian``).
All are probe metrics (:mod:`actlab.probe.collectors`) measured in one :func:`measure_once`.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import os
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from torch import Tensor, nn

from actlab.errors import renamed_keywords
from actlab.hf import THRESHOLDS
from actlab.layout import mlp_layout, mlp_sites
from actlab.probe.measure import measure_once

SITE_METRICS = ("act_mean", "preact_neg_frac", "sparsity", "saturation_frac", "dead_frac")
# One line per column of the report's table (the module docstring says the same at length).
METRIC_MEANINGS = {
    "act_mean": "activation bias: the mean of the activation's output",
    "preact_neg_frac": "share of negative pre-activations (what a ReLU would zero)",
    "sparsity": "share of activation outputs with |a| < 1e-7",
    "saturation_frac": "share of outputs in the flat tails (bounded activations only)",
    "dead_frac": "share of units with |a| < 1e-7 on every input",
    "down_input_range": "max - min of the down-projection's input",
    "massive_ratio": "largest |h| of the residual stream after the block over its median |h|",
    "hidden_absmax": "largest |h| of the residual stream after the block",
    "hidden_absmedian": "median |h| of the residual stream after the block",
}
DOWN_METRICS = ("down_input_range",)
BLOCK_METRICS = ("massive_ratio", "hidden_absmax", "hidden_absmedian")
PROFILE_METRICS = SITE_METRICS + DOWN_METRICS + BLOCK_METRICS


@dataclass
class ProfileResult:
    """What :func:`profile_model` measured: the tidy frame plus the model's MLP layout."""

    frame: pd.DataFrame
    layout: list[Any]
    model_name: str = ""
    n_inputs: int = 0
    info: dict[str, Any] = field(default_factory=dict)

    def table(self) -> pd.DataFrame:
        """The tidy frame: one row per ``layer, metric, value``."""
        return self.frame.copy()

    def wide(self) -> pd.DataFrame:
        """One row per layer (sites, then blocks), one column per metric."""
        order = list(dict.fromkeys(self.frame["layer"]))
        wide = self.frame.pivot(index="layer", columns="metric", values="value")
        return wide.reindex(order)

    def summary(self) -> dict[str, Any]:
        """Headline figures and every value, JSON-ready (non-finite values become ``None``)."""
        sites = [s.act for s in self.layout]
        ranges = [self._value(s, "down_input_range") for s in sites]
        ranges = [r for r in ranges if r is not None]
        blocks = [s.block for s in self.layout if s.block]
        massive = [self._value(b, "massive_ratio") for b in blocks]
        massive = [m for m in massive if m is not None]
        neg = [self._value(s, "preact_neg_frac") for s in sites]
        neg = [v for v in neg if v is not None]
        median = statistics.median(ranges) if ranges else float("nan")
        headline = {
            "down_input_range_max_over_median": max(ranges) / median if ranges and median > 0
            else None,
            "massive_ratio_max": max(massive) if massive else None,
            "mean_preact_neg_frac": statistics.fmean(neg) if neg else None,
        }
        layers = {layer: {k: _finite(v) for k, v in row.items() if not _isnan(v)}
                  for layer, row in self.wide().to_dict(orient="index").items()}
        mlps = [{"act": s.act, "down": s.down, "block": s.block, "gated": s.gated}
                for s in self.layout]
        return {"model": self.model_name, "n_inputs": self.n_inputs, **self.info,
                "headline": {k: _finite(v) for k, v in headline.items()},
                "mlps": mlps, "layers": layers}

    def write(self, out: str | os.PathLike) -> Path:
        """Write ``report.html`` (figure first, then the per-layer table) and ``summary.json``."""
        folder = Path(out)
        folder.mkdir(parents=True, exist_ok=True)
        summary = self.summary()
        (folder / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        (folder / "report.html").write_text(_html(self, summary, _figure_png(self)))
        return folder

    def _value(self, layer: str, metric: str) -> float | None:
        hit = self.frame[(self.frame["layer"] == layer) & (self.frame["metric"] == metric)]
        return float(hit["value"].iloc[0]) if len(hit) else None


@renamed_keywords(inputs="batches", sites="activations")
def profile_model(model: nn.Module, batches: Iterable[Any], *,
                  activations: list[str] | None = None,
                  forward: Callable[[Any], Any] | None = None, eval_mode: bool = True,
                  eps: float = 1e-7) -> ProfileResult:
    """Profile the MLPs and blocks of any ``nn.Module`` over ``batches`` (one forward pass
    per item).

    ``activations`` (names of the activation modules to profile) default to the model's
    unbounded activation modules (:func:`actlab.hf.mlp_sites`), or all activation modules if
    none is unbounded; down-projections and blocks are found by
    :func:`actlab.hf.mlp_layout`. Each batch runs as ``forward(batch)`` (default: dicts as
    keywords, tensors as they are), in eval mode unless ``eval_mode=False`` (the mode is
    restored), without gradients. The model is not modified. The old keyword names
    ``inputs=`` and ``sites=`` still work for one release, with a ``DeprecationWarning``.
    """
    from actlab.surgery import find_activations

    sites = activations
    if sites is None:
        sites = list(mlp_sites(model)) or list(find_activations(model))
    if not sites:
        raise ValueError(f"{type(model).__name__} has no activation modules to profile "
                         f"(activations called as functions cannot be hooked)")
    layout = mlp_layout(model, sites)
    downs = {s.down: s.act for s in layout if s.down}
    blocks = [s.block for s in layout if s.block]
    counted = _Counted(batches)
    chosen = set(sites)
    frame = measure_once(model, counted, metrics=PROFILE_METRICS,
                         activations=lambda name, module: name in chosen,
                         blocks=blocks or None, input_modules=list(downs) or None,
                         eps=eps,
                         forward=forward, eval_mode=eval_mode)
    if counted.n == 0:
        raise ValueError("profile_model: no batches to profile (the iterable was empty)")
    # the down-projection's input belongs to its MLP: report it under the site's name
    frame["layer"] = [downs.get(layer, layer) if metric in DOWN_METRICS else layer
                      for layer, metric in zip(frame["layer"], frame["metric"])]
    return ProfileResult(frame, layout, type(model).__name__, counted.n)


class _Counted:
    """Iterate over ``items`` once, counting them."""

    def __init__(self, items: Iterable[Any]) -> None:
        self.items, self.n = items, 0

    def __iter__(self):
        for item in self.items:
            self.n += 1
            yield item


def _isnan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


def _finite(value: Any) -> Any:
    return value if not isinstance(value, float) or math.isfinite(value) else None


def _figure_png(result: ProfileResult) -> bytes:
    """Three panels per MLP index: shares, down-projection input range, massive ratio."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MultipleLocator

    layout = result.layout
    x = list(range(len(layout)))

    def series(names: list[str | None], metric: str) -> list[float]:
        values = [result._value(n, metric) if n else None for n in names]
        return [float("nan") if v is None else v for v in values]

    acts = [s.act for s in layout]
    fig, (left, mid, right) = plt.subplots(1, 3, figsize=(13, 3.6))
    for metric in ("preact_neg_frac", "sparsity", "dead_frac", "saturation_frac"):
        values = series(acts, metric)
        if not all(math.isnan(v) for v in values):  # saturation only for bounded sites
            left.plot(x, values, marker="o", label=metric)
    left.set(xlabel="MLP", ylabel="share", ylim=(-0.02, 1.02), title="activation shares")
    left.legend(fontsize=7)
    mid.bar(x, series(acts, "down_input_range"))
    mid.set(xlabel="MLP", ylabel="max - min", title="down-projection input range")
    right.bar(x, series([s.block for s in layout], "massive_ratio"))
    right.set(xlabel="block", ylabel="max |h| / median |h|", title="massive activations")
    step = max(1, math.ceil(len(layout) / 12))  # at most about a dozen labels
    for ax in (left, mid, right):  # the x axis counts MLPs and blocks: whole numbers only
        ax.set_xlim(-0.5, max(len(layout), 1) - 0.5)
        ax.xaxis.set_major_locator(MultipleLocator(step))
    if not any(s.block for s in layout):
        right.text(0.5, 0.5, "no blocks found", ha="center", va="center",
                   transform=right.transAxes)
    fig.suptitle(result.model_name)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return buf.getvalue()


def _html(result: ProfileResult, summary: dict[str, Any], png: bytes) -> str:
    """A self-contained page: headline, figure, per-layer table, the layout folded away."""
    esc = html.escape
    head = "".join(f"<li>{esc(k)}: {esc(_fmt(v))}</li>" for k, v in summary["headline"].items())
    wide = result.wide()
    cols = list(wide.columns)
    rows = "".join(
        "<tr><td>" + esc(str(layer)) + "</td>"
        + "".join(f"<td>{esc(_fmt(row[c]))}</td>" for c in cols) + "</tr>"
        for layer, row in wide.iterrows())
    table = ("<table><tr><th>layer</th>" + "".join(f"<th>{esc(c)}</th>" for c in cols)
             + "</tr>" + rows + "</table>")
    layout = esc(json.dumps(summary["mlps"], indent=1))
    image = base64.b64encode(png).decode("ascii")
    definitions = "".join(f"<dt>{esc(c)}</dt><dd>{esc(METRIC_MEANINGS[c])}</dd>"
                          for c in cols if c in METRIC_MEANINGS)
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>actlab profile: {esc(result.model_name)}</title>
<style>body{{font-family:sans-serif;margin:2em}}td,th{{padding:2px 8px;text-align:right}}
td:first-child{{text-align:left}}img{{max-width:100%}}</style></head><body>
<h1>actlab profile: {esc(result.model_name)}</h1>
<p>{result.n_inputs} inputs, {len(result.layout)} MLPs.</p>
<img alt="profile figure" src="data:image/png;base64,{image}">
<ul>{head}</ul>
<h2>Per layer</h2>
{table}
<h3>What the columns mean</h3>
<dl>{definitions}</dl>
<details><summary>MLP layout</summary><pre>{layout}</pre></details>
</body></html>
"""


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.4g}"
    return "" if value is None else str(value)


@renamed_keywords(inputs="batches")
def layer_profile(model: nn.Module, batches: list[dict[str, Tensor]]
                  ) -> dict[str, dict[str, float]]:
    """Per-layer activation statistics over ``batches`` (one forward pass per item), keyed
    by layer index (as a string).

    Per layer: the metrics of :func:`actlab.profile_model` (``act_mean``, ``preact_neg_frac``,
    ``sparsity``, ``dead_frac``, ``down_input_range``, ``massive_ratio``, ...), plus
    ``act_range``, ``act_max``, ``act_min``, ``hidden_mean`` (the layer's output hidden
    states) and, for each entry of :data:`THRESHOLDS`, the share of MLP activation outputs
    with ``|a|`` below it. The model runs in eval mode (restored afterwards).
    """
    layout = mlp_layout(model)
    index = {**{s.act: str(i) for i, s in enumerate(layout)},
             **{s.block: str(i) for i, s in enumerate(layout) if s.block}}
    out: dict[str, dict[str, float]] = {str(i): {} for i in range(len(layout))}
    for row in profile_model(model, batches, eval_mode=True).table().itertuples():
        out[index[row.layer]][row.metric] = float(row.value)
    sites = [s.act for s in layout]
    blocks = [s.block for s in layout if s.block]
    for key, eps in THRESHOLDS.items():
        extra = ("act_range", "act_max", "act_min", "hidden_mean") if key == "sparsity" else ()
        table = measure_once(model, batches, metrics=("sparsity", *extra),
                             activations=lambda name, m: name in sites,
                             blocks=blocks if extra else None, eps=eps, eval_mode=True)
        for row in table.itertuples():
            out[index[row.layer]][key if row.metric == "sparsity" else row.metric] = float(row.value)
    return out
