"""Probes inside other training loops.

* :mod:`actlab.integrations.transformers` — ``ProbeCallback`` for ``transformers.Trainer``
  (needs ``pip install actlab[hf]``);
* :mod:`actlab.integrations.lightning` — ``ProbeCallback`` for ``lightning.pytorch``
  (needs ``pip install actlab[lightning]``).

Each submodule imports its framework, so import the one you use.
"""
