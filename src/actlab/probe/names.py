"""Layer names as in the unwrapped model, whatever wraps it.

``torch.compile`` puts a model under ``_orig_mod``, DDP under ``module``, FSDP1 and
activation checkpointing under their own attributes; a probe names layers as the user's own
model does, so tables from compiled, distributed and plain runs line up row by row.
"""

from __future__ import annotations

from torch import nn

#: attributes wrappers keep the wrapped module in; stripped wherever they occur in a name
_WRAPPER_SEGMENTS = frozenset({"_orig_mod", "_fsdp_wrapped_module", "_checkpoint_wrapped_module"})
#: DDP's attribute: stripped only at the start (a user's own child may be called ``module``)
_LEADING_SEGMENTS = frozenset({"module"})


def layer_name(name: str, *, strip_module: bool = True) -> str:
    """``name`` without wrapper segments: ``"_orig_mod.module.blocks.0"`` -> ``"blocks.0"``.

    ``_orig_mod``, ``_fsdp_wrapped_module`` and ``_checkpoint_wrapped_module`` are removed
    anywhere (a compiled submodule adds ``_orig_mod`` in the middle of a name); DDP's
    ``module`` only before the first other segment, and only with ``strip_module``.
    """
    parts = [p for p in name.split(".") if p not in _WRAPPER_SEGMENTS]
    start = 0
    while strip_module and start < len(parts) and parts[start] in _LEADING_SEGMENTS:
        start += 1
    return ".".join(parts[start:])


def unwrapped_modules(model: nn.Module) -> dict[str, nn.Module]:
    """``model.named_modules()`` keyed by :func:`layer_name`, wrappers left out.

    A wrapper and the module it wraps get the same name; the wrapped (innermost) one is kept,
    since its submodules are the ones that run. DDP's ``module`` is stripped only when DDP
    wraps the root, so a child of a plain model called ``module`` keeps its name.
    """
    strip_module = is_ddp(model)
    out: dict[str, nn.Module] = {}
    for name, module in model.named_modules():
        # named_modules lists a wrapper before what it wraps: the inner module wins
        out[layer_name(name, strip_module=strip_module)] = module
    return out


def is_ddp(model: nn.Module) -> bool:
    """Whether a DDP-style wrapper (``module`` attribute) sits at the root, under any
    ``torch.compile`` wrappers."""
    while True:
        inner = getattr(model, "_orig_mod", None)
        if not isinstance(inner, nn.Module):
            break
        model = inner
    return (type(model).__name__ in ("DistributedDataParallel", "DataParallel")
            and isinstance(getattr(model, "module", None), nn.Module))
