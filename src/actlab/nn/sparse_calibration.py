"""Where a model's FFNs read their inputs, and TEAL's magnitude thresholds for them.

TEAL (training-free activation sparsity) zeroes, at the input of a projection, the entries
whose magnitude is below a threshold, calibrated per layer so that a target share of the
entries falls below it. :func:`calibrate_thresholds` does that for the two inputs of every
FFN, on a few batches of the model's own data:

* the FFN input (read by the up projection, and by the gate of a gated FFN);
* the down projection's input (the activation's output, times the up branch when gated).

The threshold of a site is the ``sparsity``-quantile of ``|x|`` over all entries the site saw
(a selection, ``torch.kthvalue``), so that at inference ``|x| <= threshold`` zeroes that share
of entries on data like the calibration's. :func:`ffn_sites` finds the FFNs: every actlab
:class:`~actlab.nn.ffn.FFN` / :class:`~actlab.nn.ffn.GatedFFN`, and each Hugging Face MLP
(:func:`actlab.layout.mlp_layout`) with its input projections (the dense layers beside the
activation, such as BERT's ``intermediate.dense`` or LLaMA's ``gate_proj`` and ``up_proj``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from actlab.nn.ffn import FFN, GatedFFN

__all__ = ["FFNSite", "SiteThresholds", "calibrate_thresholds", "ffn_sites", "run_batch"]

# Entries kept per site and input for the quantile (a fixed-seed random subset beyond it):
# enough for a quantile to about 1e-3 and bounded memory on large models.
MAX_VALUES = 1 << 22


@dataclass(frozen=True)
class FFNSite:
    """One FFN: its name, the modules that read its input, its down projection.

    ``name`` is the FFN module's name for an actlab FFN and the down projection's name for a
    Hugging Face MLP (which has no single module). ``inputs`` are the projections that read
    the FFN input (up; gate first for a gated FFN); ``module`` is the actlab FFN or ``None``.
    """

    name: str
    inputs: tuple[str, ...]
    down: str
    module: FFN | GatedFFN | None = None


@dataclass(frozen=True)
class SiteThresholds:
    """TEAL's magnitude thresholds of one FFN: entries with ``|x| <= threshold`` are zeroed."""

    ffn_input: float
    down_input: float


def ffn_sites(model: nn.Module) -> list[FFNSite]:
    """The FFNs of ``model``: actlab FFN modules and Hugging Face MLPs, in module order."""
    sites: list[FFNSite] = []
    for name, module in model.named_modules():
        prefix = f"{name}." if name else ""
        if isinstance(module, GatedFFN):
            sites.append(FFNSite(name, (prefix + "gate_proj", prefix + "up"), prefix + "down",
                                 module))
        elif isinstance(module, FFN):
            sites.append(FFNSite(name, (prefix + "up",), prefix + "down", module))
    if not any(type(m).__module__.startswith("transformers.") for m in model.modules()):
        return sites
    from actlab.layout import is_dense, mlp_layout

    named = dict(model.named_modules())
    covered = [s.name for s in sites]
    for site in mlp_layout(model):
        if site.down is None or any(site.down.startswith(n + ".") for n in covered if n):
            continue
        parent = site.act.rpartition(".")[0]
        prefix = f"{parent}." if parent else ""
        container = named.get(parent, model)
        inputs = tuple(prefix + child for child, m in container.named_children()
                       if is_dense(m) and prefix + child != site.down)
        sites.append(FFNSite(site.down, inputs, site.down))
    return sites


def run_batch(model: nn.Module, batch: Any) -> Any:
    """``model(batch)``; a dict is passed as keyword arguments, a tuple or list as positional."""
    if isinstance(batch, dict):
        return model(**batch)
    if isinstance(batch, (tuple, list)):
        return model(*batch)
    return model(batch)


def calibrate_thresholds(model: nn.Module, batches: Iterable[Any], sparsity: float, *,
                         sites: list[FFNSite] | None = None,
                         max_values: int = MAX_VALUES) -> dict[str, SiteThresholds]:
    """Per FFN (by :attr:`FFNSite.name`), the thresholds that zero ``sparsity`` of its input's
    and its down projection's input's entries on ``batches``.

    ``batches`` are inputs of ``model`` (see :func:`run_batch`), run under ``torch.no_grad()``
    in the model's current mode (put it in ``eval()`` first). Raises ValueError for a sparsity
    outside [0, 1), no batch, or a model without FFNs.
    """
    if not 0.0 <= sparsity < 1.0:
        raise ValueError(f"sparsity must be in [0, 1), got {sparsity}")
    sites = ffn_sites(model) if sites is None else sites
    if not sites:
        raise ValueError(f"calibrate_thresholds found no FFN in {type(model).__name__}")
    named = dict(model.named_modules())
    seen: dict[tuple[str, str], list[Tensor]] = {}
    generator = torch.Generator().manual_seed(0)

    def keep(key: tuple[str, str]) -> Callable[..., None]:
        def hook(_module: nn.Module, args: tuple[Any, ...]) -> None:
            values = args[0].detach().abs().reshape(-1).float().cpu()
            if values.numel() > max_values:
                pick = torch.randperm(values.numel(), generator=generator)[:max_values]
                values = values[pick]
            seen.setdefault(key, []).append(values)

        return hook

    handles = []
    for site in sites:
        handles.append(named[site.inputs[0]].register_forward_pre_hook(keep((site.name, "in"))))
        handles.append(named[site.down].register_forward_pre_hook(keep((site.name, "down"))))
    count = 0
    try:
        with torch.no_grad():
            for batch in batches:
                run_batch(model, batch)
                count += 1
    finally:
        for handle in handles:
            handle.remove()
    if count == 0:
        raise ValueError("calibrate_thresholds needs at least one batch")
    return {site.name: SiteThresholds(_quantile(seen[(site.name, "in")], sparsity, max_values),
                                      _quantile(seen[(site.name, "down")], sparsity, max_values))
            for site in sites}


def _quantile(parts: list[Tensor], q: float, max_values: int) -> float:
    """The value below or at which a share ``q`` of the entries lie (0 for ``q == 0``)."""
    values = torch.cat(parts)
    if values.numel() > max_values:
        values = values[torch.randperm(values.numel(),
                                       generator=torch.Generator().manual_seed(1))[:max_values]]
    k = int(q * values.numel())
    if k == 0:
        return 0.0
    return float(torch.kthvalue(values, k).values)
