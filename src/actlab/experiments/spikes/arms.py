"""The conditions (units) of the ``spikes`` experiment besides its activations.

* the **base**: every activation of ``activations`` at the config's shape and ``norm``; a
  unit ``{"activation": spec}``, its rows under the run name ``spec`` (as before the other
  arms existed, so a base unit keeps its id and its rows);
* the **norm arm** ("Bug or Feature²" §6, Fig. 6; the short version's Fig. 7: spike ranges
  shrink under centring or quantile norms): every activation of ``norm_activations`` under
  each normalisation of ``norms`` (``rmsnorm``, as the authors' released code; a centring one,
  ``layernorm``; a quantile one, ``percentile-layernorm:q=0.5``); a unit
  ``{"activation": spec, "norm": norm}``, rows under ``"<norm>/<spec>"``. The config's own
  ``norm`` with an activation the base already trains is not trained twice: its arm is the
  base run;
* the **depth arm** (§6: spikes in *early* layers of the 12-layer GPT-nano): every activation
  of ``depth_activations`` at ``depth_layers`` blocks of width ``depth_width``; a unit
  ``{"activation": spec, "n_layer": L, "n_embd": W}``, rows under ``"<L>x<W>/<spec>"``.

Every arm trains on the same batches from the same initial weights per seed as the base
whenever its shape is the base's (the GPT's norms draw nothing from the initialisation's
generator), so a norm arm and the base pair per seed.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from actlab.experiments.spikes import SpikesConfig


def units(config: SpikesConfig) -> list[dict[str, Any]]:
    """The base units, then the norm arm's, then the depth arm's (module docstring)."""
    out: list[dict[str, Any]] = [{"activation": spec} for spec in config.activations]
    for norm in norm_arms(config):
        out += [{"activation": spec, "norm": norm} for spec in config.norm_activations
                if not is_base(config, norm, spec)]
    if config.depth_layers:
        out += [{"activation": spec, "n_layer": config.depth_layers, "n_embd": config.depth_width}
                for spec in config.depth_activations]
    return out


def norm_arms(config: SpikesConfig) -> list[str]:
    """The normalisations the norm arm compares: the config's ``norm`` and ``norms`` (in
    order, once each); none when ``norms`` is empty."""
    if not config.norms:
        return []
    return list(dict.fromkeys([config.norm, *config.norms]))


def is_base(config: SpikesConfig, norm: str, spec: str) -> bool:
    """Whether the norm arm's run of ``spec`` under ``norm`` is the base run itself."""
    return norm == config.norm and spec in config.activations


def run_name(config: SpikesConfig, unit: dict[str, Any]) -> str:
    """The rows' run name of ``unit`` (module docstring)."""
    spec = unit["activation"]
    if "n_layer" in unit:
        return f"{depth_name(unit['n_layer'], unit['n_embd'])}/{spec}"
    if "norm" in unit:
        return norm_run(config, unit["norm"], spec)
    return spec


def norm_run(config: SpikesConfig, norm: str, spec: str) -> str:
    """The run name of ``spec`` under ``norm`` in the norm arm (the base run's, when it is one)."""
    return spec if is_base(config, norm, spec) else f"{norm}/{spec}"


def depth_name(n_layer: int, n_embd: int) -> str:
    """The depth arm's prefix, ``"<layers>x<width>"``."""
    return f"{n_layer}x{n_embd}"


def unit_scale(config: SpikesConfig, unit: dict[str, Any]) -> SpikesConfig:
    """The config a unit trains with: the base's, with the unit's norm or shape."""
    changes = {key: unit[key] for key in ("norm", "n_layer", "n_embd") if key in unit}
    return replace(config, **changes) if changes else config
