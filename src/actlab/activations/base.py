"""Marker base class of every activation module that actlab builds from a spec."""

from __future__ import annotations

from torch import nn


class Activation(nn.Module):
    """Base class of actlab activation modules.

    ``spec`` holds the canonical spec string the module was built from, so probes,
    surgery and reports can name it. Subclasses implement ``forward``.
    """

    spec: str = ""

    def extra_repr(self) -> str:
        return f"spec={self.spec!r}"
