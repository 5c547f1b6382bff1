"""Muon on the hidden weight matrices, AdamW on everything else ("Bug or Feature²" App. D.6).

The paper trains GPT-nano "using the Muon optimizer for linear layers and Adam for all other
parameters". :func:`muon_split` makes that split for any module: the 2-D ``weight`` of every
``nn.Linear`` goes to Muon except the output layer's (the last ``nn.Linear`` registered, or
the one named by ``head``) and any weight shared with an ``nn.Embedding`` (a tied head);
embeddings, norms, biases and scalars go to AdamW. :func:`make_muon` builds :class:`Muon`
and ``torch.optim.AdamW`` over the two parts and joins them in a :class:`CombinedOptimizer`,
which steps, zeroes and (de)serialises both as one optimizer.

:class:`Muon` is ``torch.optim.Muon`` (its constructor, checks, defaults and state) with one
setting more, the dtype of the Newton-Schulz iteration: torch runs it in bfloat16, as the
paper's released code does, and so does :class:`Muon` on CUDA (``ns_dtype="auto"``) -- the
update is then torch's to the bit (tested). On the CPU ``"auto"`` is float32: a CPU without
native bfloat16 arithmetic makes the bfloat16 iteration 39 times AdamW's update at the quick
scale and 227 times at the default one, a training step 2.8 and 3.4 times AdamW's
(``benchmarks/gpt_step.py --muon-ns-dtype bfloat16``; float32: 1.1 and 1.05 times). float32
computes the same iteration with less rounding.

Learning rates. The released code of the paper steps a matrix of shape ``A x B`` by
``lr_muon * sqrt(max(A, B)) * NS(update)`` with ``lr_muon = 0.1 * lr`` (``lr`` the AdamW
rate). ``torch.optim.Muon``'s ``adjust_lr_fn="match_rms_adamw"`` scales by
``0.2 * sqrt(max(A, B))`` (its ``"original"``, ``sqrt(max(1, A / B))``, does not grow with
the width), so the Muon groups run ``match_rms_adamw`` at ``lr * lr_ratio / 0.2``: the step is
``lr * lr_ratio * sqrt(max(A, B)) * NS(update)``, the released code's for ``lr_ratio=0.1``.
The factor ``lr_ratio / 0.2`` is kept in each Muon group as ``lr_scale``; the engine's
schedule sets a group's rate to ``lr(step) * lr_scale``. Muon's weight decay is passed
explicitly (``torch.optim.Muon`` defaults to 0.1; the paper uses none); torch applies it as
``param *= 1 - group_lr * weight_decay``.

What torch computes as the paper's code does: momentum 0.95 with Nesterov (torch keeps the
buffer as an average, ``buf = m buf + (1 - m) g``, the released code as a sum, ``buf = m buf +
g``; the Nesterov update of the first is ``(1 - m)`` times the second's and Newton-Schulz
normalises it away, up to bfloat16 rounding), 5 quintic Newton-Schulz steps with the
coefficients (3.4445, -4.7750, 2.0315) in bfloat16. One difference: the released code
orthogonalises a fused ``3d x d`` QKV matrix as three ``d x d`` blocks; torch orthogonalises a
parameter as one matrix, so a fused ``qkv`` weight is one ``3d x d`` matrix here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from actlab.errors import ConfigError

MUON = "muon"
MATCH_RMS = 0.2  # torch.optim.Muon's "match_rms_adamw" factor, divided out of the group lr
MUON_ADJUST = "match_rms_adamw"


def check_muon_available() -> None:
    """``ConfigError`` when this torch has no ``torch.optim.Muon`` (added in PyTorch 2.9)."""
    if getattr(torch.optim, "Muon", None) is None:
        raise ConfigError("optimizer", f"muon needs torch.optim.Muon (PyTorch >= 2.9); this is "
                                       f"torch {torch.__version__}: upgrade torch or use adamw")


NS_DTYPES = ("auto", "bfloat16", "float32")
_NS_TORCH = {"bfloat16": torch.bfloat16, "float32": torch.float32}


def ns_torch_dtype(name: str, device: torch.device) -> torch.dtype:
    """The dtype of the Newton-Schulz iteration: ``auto`` is bfloat16 on CUDA, else float32."""
    if name not in NS_DTYPES:
        raise ConfigError("muon_ns_dtype", f"must be one of {', '.join(NS_DTYPES)}, got {name!r}")
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return _NS_TORCH[name]


def newton_schulz(grad: Tensor, coefficients: Sequence[float], steps: int, eps: float,
                  dtype: torch.dtype) -> Tensor:
    """``torch.optim.Muon``'s orthogonalisation of a 2-D ``grad`` (the same operations: scale to
    norm 1, ``steps`` quintic iterations ``X <- a X + (b A + c A A) X`` with ``A = X X^T`` on the
    wide orientation), in ``dtype``; ``grad`` is not modified."""
    a, b, c = coefficients
    x = grad.to(dtype)
    tall = grad.size(0) > grad.size(1)
    if tall:
        x = x.T
    x = x / x.norm().clamp(min=eps)
    for _ in range(steps):
        gram = x @ x.T
        update = torch.addmm(gram, gram, gram, beta=b, alpha=c)
        x = torch.addmm(x, update, x, beta=a)
    return x.T if tall else x


def adjusted_lr(lr: float, adjust_lr_fn: str | None, shape: Sequence[int]) -> float:
    """The rate of a matrix of ``shape`` as ``torch.optim.Muon`` adjusts it: ``"original"``
    (or ``None``) ``lr * sqrt(max(1, A / B))``, ``"match_rms_adamw"`` ``lr * 0.2 * sqrt(max(A, B))``."""
    rows, cols = shape[:2]
    if adjust_lr_fn in (None, "original"):
        return lr * math.sqrt(max(1, rows / cols))
    if adjust_lr_fn == MUON_ADJUST:
        return lr * MATCH_RMS * math.sqrt(max(rows, cols))
    raise ValueError(f"unknown adjust_lr_fn {adjust_lr_fn!r}")


# torch.optim.Muon arrived in PyTorch 2.9; without it Muon is never built (the check raises).
_TorchMuon: type = getattr(torch.optim, "Muon", torch.optim.Optimizer)


class Muon(_TorchMuon):  # type: ignore[misc, valid-type]
    """``torch.optim.Muon`` whose Newton-Schulz iteration runs in each group's ``ns_dtype``
    (module docstring; ``"auto"`` when a group has none). The rest is torch's: momentum
    ``buf.lerp_(g, 1 - m)``, Nesterov ``g.lerp(buf, m)``, decoupled decay ``p *= 1 - lr wd``,
    then the step ``adjust_lr_fn``'s rate times the orthogonalised update."""

    def __init__(self, params: Any, **kwargs: Any) -> None:
        check_muon_available()
        super().__init__(params, **kwargs)

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        """One Muon step of every group (``closure`` evaluated first, with gradients)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            momentum = group["momentum"]
            for param in group["params"]:
                grad = param.grad
                if grad is None:
                    continue
                if torch.is_complex(param) or grad.is_sparse:
                    raise RuntimeError("Muon supports real dense gradients only")
                state = self.state[param]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(
                        grad, memory_format=torch.preserve_format)
                buf = state["momentum_buffer"]
                buf.lerp_(grad, 1 - momentum)
                update = grad.lerp(buf, momentum) if group["nesterov"] else buf
                dtype = ns_torch_dtype(group.get("ns_dtype", "auto"), param.device)
                update = newton_schulz(update, group["ns_coefficients"], group["ns_steps"],
                                       group["eps"], dtype)
                param.mul_(1 - group["lr"] * group["weight_decay"])
                param.add_(update, alpha=-adjusted_lr(group["lr"], group["adjust_lr_fn"],
                                                      param.shape))
        return loss


def muon_split(model: nn.Module, head: str | None = None
               ) -> tuple[list[tuple[str, nn.Parameter]], list[tuple[str, nn.Parameter]]]:
    """``(muon, other)``: the trainable ``(name, parameter)`` pairs of ``model`` for Muon and
    for AdamW (see the module docstring); shared parameters are listed once.

    ``head`` names the output layer (default: the last ``nn.Linear`` of ``named_modules``).
    """
    modules = dict(model.named_modules())
    linears = [name for name, m in modules.items() if isinstance(m, nn.Linear)]
    if head is None:
        head = linears[-1] if linears else None
    elif not isinstance(modules.get(head), nn.Linear):
        raise ConfigError("head", f"no nn.Linear named {head!r} in the model")
    embedded = {id(m.weight) for m in modules.values() if isinstance(m, nn.Embedding)}
    excluded = embedded | ({id(modules[head].weight)} if head is not None else set())
    hidden = {id(modules[n].weight) for n in linears
              if modules[n].weight.dim() == 2 and id(modules[n].weight) not in excluded}
    muon: list[tuple[str, nn.Parameter]] = []
    other: list[tuple[str, nn.Parameter]] = []
    for name, param in model.named_parameters():  # each shared parameter once
        if param.requires_grad:
            (muon if id(param) in hidden else other).append((name, param))
    return muon, other


class CombinedOptimizer:
    """Several ``torch.optim`` optimizers over disjoint parameters, used as one.

    ``param_groups`` lists every optimizer's groups (the same dicts, so setting ``lr`` on them
    reaches the optimizers); ``state_dict()`` numbers parameters across the optimizers in
    order, as one optimizer's ``state_dict`` would, and ``load_state_dict`` splits it back.
    """

    def __init__(self, optimizers: Sequence[torch.optim.Optimizer]) -> None:
        if not optimizers:
            raise ValueError("CombinedOptimizer needs at least one optimizer")
        self.optimizers = list(optimizers)

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        """Every optimizer's param groups, in order."""
        return [group for opt in self.optimizers for group in opt.param_groups]

    @property
    def state(self) -> dict[Tensor, dict[str, Any]]:
        """Per-parameter state of all the optimizers."""
        return {p: s for opt in self.optimizers for p, s in opt.state.items()}

    def step(self, closure: Any = None) -> Any:
        """One step of every optimizer (``closure`` evaluated once, before them)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for opt in self.optimizers:
            opt.step()
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Zero (or drop) the gradients of every optimizer's parameters."""
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:
        """``{"state": {index: ...}, "param_groups": [...]}`` with indices across optimizers."""
        state: dict[int, Any] = {}
        groups: list[dict[str, Any]] = []
        offset = 0
        for opt in self.optimizers:
            own = opt.state_dict()
            state.update({index + offset: value for index, value in own["state"].items()})
            groups += [{**g, "params": [i + offset for i in g["params"]]}
                       for g in own["param_groups"]]
            offset += sum(len(g["params"]) for g in opt.param_groups)
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (same optimizers and parameters)."""
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise ValueError(f"state has {len(groups)} param groups, the optimizer "
                             f"{len(self.param_groups)}")
        offset, start = 0, 0
        for opt in self.optimizers:
            mine = groups[start:start + len(opt.param_groups)]
            start += len(opt.param_groups)
            count = sum(len(g["params"]) for g in opt.param_groups)
            state = {int(i) - offset: v for i, v in state_dict["state"].items()
                     if offset <= int(i) < offset + count}
            opt.load_state_dict({"state": state, "param_groups": [
                {**g, "params": [i - offset for i in g["params"]]} for g in mine]})
            offset += count

    def __repr__(self) -> str:
        return f"CombinedOptimizer({', '.join(type(o).__name__ for o in self.optimizers)})"


def make_muon(params: Iterable[Any], lr: float, *, weight_decay: float = 0.0,
              betas: tuple[float, float] = (0.9, 0.95), lr_ratio: float = 0.1,
              momentum: float = 0.95, nesterov: bool = True, ns_steps: int = 5,
              muon_weight_decay: float | None = None,
              ns_dtype: str = "auto") -> CombinedOptimizer:
    """:class:`Muon` over the Muon parameters and ``torch.optim.AdamW`` (rate ``lr``,
    ``betas``, ``weight_decay``) over the rest, as one :class:`CombinedOptimizer`.

    ``params``: param groups, those for Muon marked ``"muon": True`` (as
    :meth:`~actlab.train.loop.make_engine_optimizer` builds them from :func:`muon_split`), or
    plain tensors, of which the 2-D ones go to Muon. Muon's step on an ``A x B`` matrix is
    ``lr * lr_ratio * sqrt(max(A, B)) * NS(update)`` (module docstring); its weight decay is
    ``muon_weight_decay`` (``None``: ``weight_decay``); ``ns_dtype`` that of its Newton-Schulz
    iteration (:data:`NS_DTYPES`). Defaults: the released code of "Bug or Feature²" (ratio
    0.1, momentum 0.95, Nesterov, 5 Newton-Schulz steps).
    """
    check_muon_available()
    ns_torch_dtype(ns_dtype, torch.device("cpu"))  # a bad name fails here, not at the step
    items = list(params)
    if all(isinstance(p, Tensor) for p in items):
        items = [{"params": [p for p in items if p.dim() != 2]},
                 {"params": [p for p in items if p.dim() == 2], "muon": True}]
    muon_groups, adam_groups = [], []
    for group in items:
        if not isinstance(group, dict):
            raise TypeError("muon: give parameter tensors or param groups, not a mix")
        rest = {k: v for k, v in group.items() if k != "muon"}
        rest["params"] = list(rest["params"])
        if rest["params"]:
            (muon_groups if group.get("muon") else adam_groups).append(rest)
    if not muon_groups:
        raise ConfigError("optimizer", "muon: the model has no hidden weight matrices for Muon")
    decay = weight_decay if muon_weight_decay is None else muon_weight_decay
    scale = lr_ratio / MATCH_RMS
    for group in muon_groups:
        group.setdefault("lr_scale", scale)
        group.setdefault("weight_decay", decay)
        group.setdefault("ns_dtype", ns_dtype)
    optimizers: list[torch.optim.Optimizer] = []
    if adam_groups:
        optimizers.append(torch.optim.AdamW(adam_groups, lr=lr, betas=betas,
                                            weight_decay=weight_decay))
    optimizers.append(Muon(muon_groups, lr=lr * scale, weight_decay=decay,
                           momentum=momentum, nesterov=nesterov, ns_steps=ns_steps,
                           adjust_lr_fn=MUON_ADJUST))
    for group in optimizers[-1].param_groups:  # a group's own lr follows its lr_scale
        group["lr"] = lr * group["lr_scale"]
    return CombinedOptimizer(optimizers)
