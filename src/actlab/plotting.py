"""The one place that picks matplotlib's backend for figures actlab draws.

Experiments draw figures to files, often in batch jobs without a display, so they want a
file backend (Agg). A user who chose a backend (``MPLBACKEND``, or by importing pyplot
first, as notebooks and interactive sessions do) keeps it: we only fill in the choice
nobody made, never switch away from one.
"""

from __future__ import annotations

import os
import sys
from typing import Any


def backend_chosen() -> bool:
    """Whether the user already chose a backend (``MPLBACKEND`` set or pyplot imported)."""
    return bool(os.environ.get("MPLBACKEND")) or "matplotlib.pyplot" in sys.modules


def pyplot() -> Any:
    """``matplotlib.pyplot``, on the Agg backend unless :func:`backend_chosen`."""
    import matplotlib

    if not backend_chosen():
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
