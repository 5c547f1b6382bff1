"""Find and replace the activation sites of any model (actlab, plain PyTorch, Hugging Face).

An *activation site* is a submodule that applies an activation function: an actlab
:class:`~actlab.activations.base.Activation`, a ``torch.nn`` activation module (``ReLU``,
``GELU``, ``Tanh``, ...) or a Hugging Face ``transformers.activations`` module
(``GELUActivation``, ``NewGELUActivation``, ...). Activations applied as plain functions
inside ``forward`` (``F.gelu(x)``) are not modules and cannot be found or replaced.
"""

from __future__ import annotations

import difflib
import fnmatch
import inspect
import sys
from collections.abc import Callable, Iterable

from torch import nn

from actlab.activations.base import Activation
from actlab.activations.spec_activation import activation, make_activation

#: ``torch.nn`` activation classes treated as activation sites (elementwise or gated).
TORCH_ACTIVATIONS: tuple[type[nn.Module], ...] = (
    nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.PReLU, nn.RReLU, nn.ELU, nn.CELU, nn.SELU, nn.GELU,
    nn.SiLU, nn.Mish, nn.Sigmoid, nn.Tanh, nn.Hardtanh, nn.Hardsigmoid, nn.Hardswish,
    nn.Hardshrink, nn.Softshrink, nn.Tanhshrink, nn.Softplus, nn.Softsign, nn.LogSigmoid,
    nn.Threshold, nn.GLU,
)

# Output bounds of bounded torch activations, used for ``saturation_frac``.
_TORCH_BOUNDS: dict[type[nn.Module], tuple[float, float]] = {
    nn.Sigmoid: (0.0, 1.0),
    nn.Tanh: (-1.0, 1.0),
    nn.Hardsigmoid: (0.0, 1.0),
    nn.Softsign: (-1.0, 1.0),
    nn.ReLU6: (0.0, 6.0),
}
# Bounds of actlab activations that say ``bounded`` but carry no ``bounds`` attribute.
_SPEC_BOUNDS = {"sigmoid": (0.0, 1.0), "tanh": (-1.0, 1.0), "hardtanh": (-1.0, 1.0),
                "hardsigmoid": (0.0, 1.0), "softsign": (-1.0, 1.0)}

# Identity "activations" of transformers: a site in name only, never worth probing or patching.
_HF_SKIP = {"LinearActivation", "ClassInstantier"}

Where = str | Iterable[str] | Callable[[str, nn.Module], bool] | None
# A factory of new sites: (qualified name, module replaced) -> module or spec; or no arguments.
Factory = Callable[[str, nn.Module], nn.Module | str] | Callable[[], nn.Module]


def _hf_activation_classes() -> tuple[type, ...]:
    """Classes of ``transformers.activations``, only if transformers is already imported.

    Importing transformers costs seconds; a model built from it has imported it already.
    """
    if "transformers" not in sys.modules:
        return ()
    try:
        import transformers.activations as hf_act
    except Exception:  # a broken optional install must not break probing of other models
        return ()
    return tuple(
        obj for name, obj in vars(hf_act).items()
        if isinstance(obj, type) and issubclass(obj, nn.Module) and obj is not nn.Module
        and obj.__module__ == hf_act.__name__ and name not in _HF_SKIP
    )


def activation_bounds(module: nn.Module) -> tuple[float, float] | None:
    """Output bounds ``(low, high)`` of a bounded activation, else ``None``.

    actlab activations report boundedness through a ``bounded`` attribute (and ``bounds``
    when they know them); ``nn.Hardtanh`` uses its ``min_val``/``max_val``.
    """
    explicit = getattr(module, "bounds", None)
    if explicit is not None:
        return (float(explicit[0]), float(explicit[1]))
    if isinstance(module, nn.Hardtanh) and not isinstance(module, nn.ReLU6):
        return (float(module.min_val), float(module.max_val))
    for cls, bounds in _TORCH_BOUNDS.items():
        if isinstance(module, cls):
            return bounds
    if getattr(module, "bounded", False):
        # only a plain spec: options such as a shift move the bounds
        return _SPEC_BOUNDS.get(str(getattr(module, "spec", "")).strip().lower())
    return None


def find_activations(model: nn.Module) -> dict[str, nn.Module]:
    """All activation sites of ``model``, as ``{qualified name: module}`` in module order.

    A module reachable under several names (shared instance) is listed once, under its first
    name. Children of a site are not searched (a site is a leaf for our purposes).
    """
    hf = _hf_activation_classes()
    kinds = (Activation, *TORCH_ACTIVATIONS, *hf)
    sites: dict[str, nn.Module] = {}
    seen: set[int] = set()

    def visit(prefix: str, module: nn.Module) -> None:
        for child_name, child in module.named_children():
            name = f"{prefix}.{child_name}" if prefix else child_name
            if isinstance(child, kinds):
                if id(child) not in seen:
                    seen.add(id(child))
                    sites[name] = child
                continue
            visit(name, child)

    if isinstance(model, kinds):
        return {"": model}
    visit("", model)
    return sites


def call_order(model: nn.Module, x: object,
               watch: Callable[[nn.Module], bool]) -> list[tuple[nn.Module, bool]]:
    """Every module of ``model`` that is an activation site (:func:`find_activations`) or that
    ``watch`` selects, in the order one forward pass on ``x`` calls it, each with whether it
    is an activation site (a module called twice appears twice).

    The pass runs on a copy in eval mode, so none of ``model``'s statistics change (a norm's
    running values, its count of computed batches); the returned modules are ``model``'s own.
    The copy is storage-free, on the ``meta`` device, so the pass costs no arithmetic; a
    forward that reads a tensor's value (a frozen norm's step counter, a data-dependent
    branch) cannot run there, and is traced on a copy where ``model`` lives instead.
    """
    import copy

    import torch

    from actlab.device import to_model_device

    own = dict(model.named_modules())

    def trace(twin: nn.Module, inputs: object) -> list[tuple[nn.Module, bool]]:
        acts = {id(m) for m in find_activations(twin).values()}
        names = {id(m): name for name, m in twin.named_modules()}
        calls: list[tuple[nn.Module, bool]] = []

        def record(module: nn.Module, args: tuple) -> None:
            calls.append((own[names[id(module)]], id(module) in acts))

        hooks = [m.register_forward_pre_hook(record) for m in twin.modules()
                 if id(m) in acts or watch(m)]
        try:
            with torch.no_grad():
                twin.eval()(inputs)
        finally:
            for h in hooks:
                h.remove()
        return calls

    is_tensor = isinstance(x, torch.Tensor)
    try:
        return trace(copy.deepcopy(model).to("meta"), x.to("meta") if is_tensor else x)
    except (RuntimeError, NotImplementedError):  # the forward read a value: no meta pass
        return trace(copy.deepcopy(model), to_model_device(model, x) if is_tensor else x)


def closest_names(name: str, valid: Iterable[str], n: int = 3) -> list[str]:
    """The valid names closest to a misspelt ``name`` (for error messages)."""
    valid = list(valid)
    close = difflib.get_close_matches(name, valid, n=n, cutoff=0.4)
    return close or valid[:n]


def select_sites(sites: dict[str, nn.Module], where: Where, *, what: str = "activation site"
                 ) -> dict[str, nn.Module]:
    """Filter ``sites`` by ``where``: ``None`` keeps all; a string or list of strings keeps
    names equal to one of them or matching it as a glob pattern (``"*.intermediate.*"``);
    a callable ``(name, module) -> bool`` is a predicate.

    Raises ValueError naming the closest valid names when a string matches nothing.
    """
    if where is None:
        return dict(sites)
    if callable(where):
        return {n: m for n, m in sites.items() if where(n, m)}
    patterns = [where] if isinstance(where, str) else list(where)
    chosen: dict[str, nn.Module] = {}
    for pattern in patterns:
        if not isinstance(pattern, str):
            raise TypeError(f"{what} selectors must be names, patterns or a predicate, got {pattern!r}")
        hits = [n for n in sites if n == pattern or fnmatch.fnmatchcase(n, pattern)]
        if not hits:
            raise ValueError(
                f"unknown {what} {pattern!r}; closest: {closest_names(pattern, sites)}"
                if sites else f"unknown {what} {pattern!r}: the model has none"
            )
        for n in hits:
            chosen[n] = sites[n]
    return {n: m for n, m in sites.items() if n in chosen}


def _unbounded(name: str, module: nn.Module) -> bool:
    return activation_bounds(module) is None


def patch_(
    model: nn.Module,
    spec: str | nn.Module | Factory,
    where: Where = None,
) -> dict[str, nn.Module]:
    """Replace activation sites of ``model`` in place; return ``{name: replaced module}``.

    ``spec`` is an actlab spec string (``"relu"``, ``"gelu:adaptive"``), an ``nn.Module``
    (deep-copied per site, so sites never share parameters) or a factory called once per
    site: ``factory(name, old)`` gets the site's qualified name and the module it replaces
    and returns the new module or a spec string, e.g. ``lambda name, old:
    actlab.spec_of(old) + ":adaptive"``; a factory that can be called without arguments (a
    class such as ``nn.GELU``, ``lambda: ...``) is called without them, as before (told
    apart by its signature). ``where`` selects sites as in :func:`select_sites`. By default (``where=None``) every
    *unbounded* site is replaced and bounded ones (tanh, sigmoid, hardtanh, ...) are kept:
    in modern networks those are gates and poolers (BERT's pooler tanh, squeeze-excitation
    sigmoids), not the hidden nonlinearity one studies. Pass ``where="*"`` to replace them too.

    Each new module is moved to the device and dtype of the module it replaces (taken from
    the replaced module's or the parent's first parameter) and keeps its train/eval mode.
    Raises ValueError when nothing is selected, since a patch that changes nothing is a bug.
    """
    sites = find_activations(model)
    if "" in sites:
        raise ValueError("patch_ needs a model that contains activations, not an activation itself")
    chosen = select_sites(sites, _unbounded if where is None else where)
    if not chosen:
        raise ValueError(
            f"patch_ selected no activation sites (found: {list(sites)[:5]}"
            f"{' ...' if len(sites) > 5 else ''}); bounded sites are only replaced when "
            "`where` names them, e.g. where='*'"
        )
    # Every (parent, attribute) holding a chosen module, so a shared instance is replaced
    # under all its names by one new module (sharing is kept).
    holders: dict[int, list[tuple[nn.Module, str]]] = {id(m): [] for m in chosen.values()}
    for parent in model.modules():
        # _modules, not named_children(): the latter hides a second name of the same child
        for child_name, child in parent._modules.items():
            if id(child) in holders:
                holders[id(child)].append((parent, child_name))
    replaced: dict[str, nn.Module] = {}
    for name, old in chosen.items():
        first_parent = holders[id(old)][0][0]
        new = _build(spec, name, old)
        ref = next(old.parameters(), None)
        if ref is None:
            ref = next(first_parent.parameters(), None)
        if ref is not None and ref.is_floating_point():
            new = new.to(device=ref.device, dtype=ref.dtype)
        new.train(old.training)
        for parent, child_name in holders[id(old)]:
            setattr(parent, child_name, new)
        replaced[name] = old
    return replaced


def _takes_site(factory: Callable[..., object]) -> bool:
    """Whether ``factory`` is called as ``factory(name, old)``. A class, or a factory that
    can be called without arguments, keeps the zero-argument call of old (so a
    ``functools.partial`` of a class with defaults left, or ``def f(x=1)``, works as before);
    one that needs arguments must accept those two."""
    if isinstance(factory, type):
        return False
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # no signature to read (some builtins): the old form
        return False
    for arguments, site in (((), False), (("site", nn.Identity()), True)):
        try:
            signature.bind(*arguments)
        except TypeError:
            continue
        return site
    raise TypeError(f"patch_: the factory {factory!r} takes {signature}; give one that takes "
                    "(name, old) or no arguments")


def _build(spec: str | nn.Module | Factory, name: str, old: nn.Module) -> nn.Module:
    """The new module for the site ``name`` that holds ``old``."""
    if isinstance(spec, str | nn.Module) or not callable(spec) or not _takes_site(spec):
        return make_activation(spec)
    new = spec(name, old)
    if isinstance(new, str):
        return activation(new)
    if not isinstance(new, nn.Module):
        raise TypeError(f"patch_: the factory returned {type(new).__name__} for the site "
                        f"{name!r}, not an nn.Module or a spec string")
    return new


def relufy_(model: nn.Module, where: Where = None) -> dict[str, nn.Module]:
    """ReLUfication: ``patch_(model, "relu", where)``; returns the replaced modules."""
    return patch_(model, "relu", where)
