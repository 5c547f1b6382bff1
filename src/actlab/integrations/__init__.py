"""Probes inside other training loops.

* :mod:`actlab.integrations.transformers` — ``ProbeCallback`` for ``transformers.Trainer``
  and ``register()``, which makes ``hidden_act="actlab:SPEC"`` valid in Hugging Face configs
  (needs ``pip install actlab[hf]``);
* :mod:`actlab.integrations.lightning` — ``ProbeCallback`` for ``lightning.pytorch``
  (needs ``pip install actlab[lightning]``).

Each submodule imports its framework, so import the one you use (both are reachable as
attributes of this package, imported on first use). ``Curvature``, the curvature schedule
both callbacks take, is exported here.
"""

from __future__ import annotations

from actlab._lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "Curvature": "._session",
})
