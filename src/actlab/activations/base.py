"""Marker base class of every activation module that actlab builds from a spec, and the one
check for torch.func transforms."""

from __future__ import annotations

import torch
from torch import nn


def functorch_transforms_active() -> bool:
    """Whether a ``torch.func`` transform (vmap, grad, jvp) is tracing the current call.

    Activations then take their out-of-place path: their fused autograd nodes and in-place
    writes are not transformable. This is actlab's only use of a private PyTorch function,
    kept here so a test fails loudly if PyTorch removes it.
    """
    return torch._C._are_functorch_transforms_active()


class Activation(nn.Module):
    """Base class of actlab activation modules.

    ``spec`` holds the canonical spec string the module was built from, so probes,
    surgery and reports can name it. Subclasses implement ``forward``.
    """

    spec: str = ""

    def extra_repr(self) -> str:
        return f"spec={self.spec!r}"
