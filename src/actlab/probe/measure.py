"""``measure_once``: probe metrics over one evaluation pass through a set of inputs.

It is one :class:`~actlab.probe.probe.Probe` step, so it lives beside ``Probe`` (whose
``dead_units`` uses it); this module is its public import path.
"""

from actlab.probe.forward import default_forward
from actlab.probe.probe import measure_once

__all__ = ["default_forward", "measure_once"]
