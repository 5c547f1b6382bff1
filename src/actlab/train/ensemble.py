"""Many seeds x conditions of a small model trained as one vmapped computation.

An :class:`Ensemble` holds *members*: for every condition (e.g. ``"unshifted"``,
``"shifted"``) one model per seed. The parameters of each condition are stacked along a
leading seed dimension (:func:`torch.func.stack_module_state`) and the members run through
:func:`torch.func.functional_call` under :func:`torch.vmap`, so one step of S seeds costs one
batched forward/backward instead of S small ones.

Paired conditions share initialisation and batch order by construction: build each
condition's models from the *same* per-seed base model (only the activation changed, say),
and feed inputs ``per_seed`` so that member ``s`` of every condition sees the same batch.

:class:`EnsembleTrainer` trains an ensemble with a functional optimizer from
:mod:`actlab.train.functional_optim`. Each member's gradient is the gradient of its own
loss (members do not interact), so the ensemble equals training every model in a Python
loop with ``torch.optim.Adam``/``SGD`` to rounding (tested to 1e-6 relative in float32).

An architecture may offer a faster whole-ensemble kernel through a method
``ensemble_forward(params, buffers, x)`` that returns the stacked outputs or ``None``;
:class:`~actlab.nn.residual_mlp.ResidualMLP` does so with opt-in C++ kernels
(:mod:`actlab.nn.residual_stack`). :meth:`Ensemble.losses` (and so training) uses it when
it returns a tensor, and vmap otherwise.

Limitations: a member's forward must be a pure function of its parameters, buffers and
inputs. Modules with Python-side state updated in ``forward`` (running-mean activations
such as ``:adaptive`` with momentum, BatchNorm running statistics in train mode) do not
vmap; train those in a loop or put them in eval mode. Random ops (dropout) need
``randomness="different"`` or ``"same"``.

Example::

    models = [ResidualMLP(20, 80, 10, activation="relu", generator=g(s)) for s in seeds]
    ens = Ensemble({"unshifted": models,
                    "shifted": [m.with_activation("relu:shift=theory") for m in models]})
    trainer = EnsembleTrainer(ens, torch.nn.functional.mse_loss, FunctionalAdam(lr=1e-3))
    out = trainer.step(x, y)          # x, y: (S, B, d) -> out.losses["shifted"]: (S,)
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor, nn
from torch.func import functional_call, stack_module_state

from actlab.device import resolve_device
from actlab.train.allocator import keep_freed_memory
from actlab.train.callbacks import Callback, fire
from actlab.train.functional_optim import FunctionalOptimizer
from actlab.train.graphed import GraphCaptureError, GraphedStep

InputMode = Literal["shared", "per_seed"]
LossFn = Callable[[Any, Any], Tensor]

DEFAULT_CONDITION = "default"


def _data_dim(value: Any, mode: InputMode, condition: str) -> tuple[Any, int | None]:
    """Select a condition's inputs and the vmap in-dim for them.

    A mapping gives each condition its own stacked inputs (leading seed dim); a tensor is
    shared by all members (``shared``) or indexed by seed (``per_seed``).
    """
    if isinstance(value, Mapping):
        return value[condition], 0
    if value is None:
        return None, None
    return value, (None if mode == "shared" else 0)


def _template_for(group: Sequence[nn.Module]) -> nn.Module:
    """A storage-free ("meta") skeleton of ``group[0]`` that serves every member of ``group``.

    A submodule that makes static choices per instance (e.g. an activation skipping the
    subtraction of a zero shift) may define ``for_members(modules)``; it is called with the
    members' submodules at the same path, so the skeleton's choice is valid for all of them.
    """
    template = copy.deepcopy(group[0]).to("meta")
    for path, module in template.named_modules():
        merge = getattr(module, "for_members", None)
        if callable(merge):
            merge([member.get_submodule(path) for member in group])
    return template


class Ensemble:
    """Conditions x seeds of one architecture with parameters stacked per condition.

    Args:
        models: ``{condition: [model_seed0, model_seed1, ...]}`` or a plain sequence (one
            condition named ``"default"``). Every condition must have the same number of
            seeds; models within a condition must share structure (they may differ from
            other conditions, e.g. in their activation). The caller's models are copied,
            never modified.
        randomness: passed to :func:`torch.vmap` (``"error"``, ``"different"``, ``"same"``).
        device: where the stacked parameters and buffers live (default: the unit's device,
            :func:`~actlab.train.placement.unit_device`); the trainer and optimizer state
            follow them.
    """

    def __init__(
        self,
        models: Mapping[str, Sequence[nn.Module]] | Sequence[nn.Module],
        *,
        randomness: str = "error",
        device: str | torch.device | None = None,
    ) -> None:
        where = resolve_device(device)
        if not isinstance(models, Mapping):
            models = {DEFAULT_CONDITION: list(models)}
        if not models:
            raise ValueError("models: need at least one condition")
        sizes = {name: len(group) for name, group in models.items()}
        if min(sizes.values()) == 0:
            raise ValueError(f"models: every condition needs at least one model, got {sizes}")
        if len(set(sizes.values())) != 1:
            raise ValueError(f"models: conditions must have the same number of seeds, got {sizes}")
        self.conditions: list[str] = list(models)
        self.num_seeds: int = next(iter(sizes.values()))
        self.randomness = randomness
        self.params: dict[str, dict[str, Tensor]] = {}
        self.buffers: dict[str, dict[str, Tensor]] = {}
        self._prototypes: dict[str, nn.Module] = {}
        self._templates: dict[str, nn.Module] = {}
        for name, group in models.items():
            params, buffers = stack_module_state(list(group))
            self.params[name] = {k: v.detach().to(where).requires_grad_(v.requires_grad)
                                 for k, v in params.items()}
            self.buffers[name] = {k: v.detach().to(where) for k, v in buffers.items()}
            self._prototypes[name] = copy.deepcopy(group[0]).to(where)
            # A stateless skeleton to call with the stacked tensors; "meta" holds no storage.
            self._templates[name] = _template_for(group)

    # ----------------------------------------------------------------- access
    @property
    def device(self) -> torch.device:
        """Where the stacked parameters live."""
        return next(iter(self.params[self.conditions[0]].values())).device

    def parameters(self) -> list[Tensor]:
        """Every stacked trainable tensor, condition by condition, in ``named_parameters`` order."""
        return [p for c in self.conditions for p in self.params[c].values() if p.requires_grad]

    def flat_params(self, condition: str) -> Tensor:
        """A ``(seeds, P)`` detached copy of each member's parameters flattened in module order."""
        tensors = self.params[condition].values()
        return torch.cat([p.detach().reshape(self.num_seeds, -1) for p in tensors], dim=1)

    def member(self, condition: str, seed_index: int) -> nn.Module:
        """A standalone copy of one member with its current parameters (for curvature, plots)."""
        model = copy.deepcopy(self._prototypes[condition])
        with torch.no_grad():
            for name, tensor in model.named_parameters():
                tensor.copy_(self.params[condition][name][seed_index])
            for name, tensor in model.named_buffers():
                if name in self.buffers[condition]:
                    tensor.copy_(self.buffers[condition][name][seed_index])
        # Members of one group may differ in buffers that a module read when it was built
        # (an activation's shift): let such modules re-read them.
        for module in model.modules():
            refresh = getattr(module, "refresh_from_buffers", None)
            if callable(refresh):
                refresh()
        return model

    def state_dict(self) -> dict[str, Any]:
        """Detached copies of all stacked parameters and buffers."""
        return {
            c: {
                "params": {k: v.detach().clone() for k, v in self.params[c].items()},
                "buffers": {k: v.clone() for k, v in self.buffers[c].items()},
            }
            for c in self.conditions
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Copy stacked parameters and buffers from :meth:`state_dict` output (in place)."""
        with torch.no_grad():
            for c in self.conditions:
                for k, v in state[c]["params"].items():
                    self.params[c][k].copy_(v)
                for k, v in state[c]["buffers"].items():
                    self.buffers[c][k].copy_(v)

    # ---------------------------------------------------------------- compute
    def _vmapped(self, condition: str, fn: Callable, x_dim: int | None, y_dim: int | None):
        template = self._templates[condition]

        def member_fn(params, buffers, x, y, kwargs):
            return fn(template, params, buffers, x, y, kwargs)

        return torch.vmap(
            member_fn, in_dims=(0, 0, x_dim, y_dim, None), randomness=self.randomness
        )

    def call(
        self,
        x: Tensor | Mapping[str, Tensor],
        *,
        inputs: InputMode = "per_seed",
        conditions: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """Forward every member: ``{condition: output stacked over seeds}``.

        ``kwargs`` go to each member's ``forward`` (e.g. ``return_stats=True``); gradients
        flow to the stacked parameters unless called under ``torch.no_grad()``.
        """

        def forward(template, params, buffers, x_, _y, kw):
            return functional_call(template, (params, buffers), (x_,), kw)

        out = {}
        for c in conditions or self.conditions:
            x_c, x_dim = _data_dim(x, inputs, c)
            out[c] = self._vmapped(c, forward, x_dim, None)(
                self.params[c], self.buffers[c], x_c, None, kwargs
            )
        return out

    def losses(
        self,
        loss_fn: LossFn,
        x: Tensor | Mapping[str, Tensor],
        y: Tensor | Mapping[str, Tensor] | None,
        *,
        inputs: InputMode = "per_seed",
        conditions: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> dict[str, Tensor]:
        """Each member's loss ``loss_fn(member(x), y)``: ``{condition: (seeds,)}``."""

        def member_loss(template, params, buffers, x_, y_, kw):
            return loss_fn(functional_call(template, (params, buffers), (x_,), kw), y_)

        out = {}
        for c in conditions or self.conditions:
            x_c, x_dim = _data_dim(x, inputs, c)
            y_c, y_dim = _data_dim(y, inputs, c)
            fused = None if kwargs else self._fused_forward(c, x_c, x_dim)
            if fused is not None:
                out[c] = torch.vmap(loss_fn, in_dims=(0, y_dim))(fused, y_c)
                continue
            out[c] = self._vmapped(c, member_loss, x_dim, y_dim)(
                self.params[c], self.buffers[c], x_c, y_c, kwargs
            )
        return out

    def _fused_forward(self, condition: str, x: Any, x_dim: int | None) -> Tensor | None:
        """The members' outputs from the architecture's own fused ensemble kernel, if it has
        one that applies (``ensemble_forward`` returning a tensor), else ``None`` (use vmap)."""
        forward = getattr(self._templates[condition], "ensemble_forward", None)
        if forward is None or not isinstance(x, Tensor):
            return None
        if x_dim is None:  # one batch shared by all members
            x = x.unsqueeze(0).expand(self.num_seeds, *x.shape)
        return forward(self.params[condition], self.buffers[condition], x)


@dataclass
class StepOutput:
    """What one :meth:`EnsembleTrainer.step` returns.

    ``losses``: ``{condition: (seeds,)}`` detached losses before the update. ``grads``:
    ``{condition: {param_name: (seeds, ...)}}`` when requested, else ``None``.
    """

    losses: dict[str, Tensor]
    grads: dict[str, dict[str, Tensor]] | None = None


@dataclass
class EnsembleTrainer:
    """Train an :class:`Ensemble` with a functional optimizer, every member on its own loss.

    Args:
        ensemble: the members (updated in place).
        loss_fn: ``loss_fn(output, target) -> scalar`` for one member (vmapped), e.g.
            :func:`torch.nn.functional.mse_loss`.
        optimizer: a :class:`~actlab.train.functional_optim.FunctionalOptimizer`.
        inputs: how a plain input tensor maps to members: ``"per_seed"`` (leading seed dim,
            shared across conditions: paired batches) or ``"shared"`` (one batch for all).
            A ``{condition: tensor}`` mapping always gives per-member inputs.
        keep_freed_memory: call :func:`actlab.train.allocator.keep_freed_memory` (glibc
            keeps freed blocks for reuse, which spares every step thousands of page
            faults; process-wide). ``False`` leaves the C allocator alone.
        graphed: record the step (forward, backward, update) as a CUDA graph and replay
            it (:mod:`actlab.train.graphed`). ``None`` (default): on a CUDA ensemble whose
            optimizer can be recorded (fused :class:`FunctionalAdam`); ``False``: always
            eager, the reference the graphed step is tested against; ``True``: required
            (an error where it is not possible). Steps with extra keyword arguments run
            eagerly.

    Members whose loss becomes non-finite are marked in :attr:`diverged` (a ``(conditions,
    seeds)`` bool tensor) and frozen: their parameters stop changing, the others go on.
    Off the CPU the flags are never read back to the host inside a step.
    """

    ensemble: Ensemble
    loss_fn: LossFn
    optimizer: FunctionalOptimizer
    inputs: InputMode = "per_seed"
    keep_freed_memory: bool = True
    graphed: bool | None = None
    diverged: Tensor = field(init=False)
    steps_done: int = field(init=False, default=0)
    last_output: StepOutput | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        if self.inputs not in ("per_seed", "shared"):
            raise ValueError(f"inputs: must be 'per_seed' or 'shared', got {self.inputs!r}")
        if self.keep_freed_memory:
            keep_freed_memory()
        ens = self.ensemble
        device = ens.device
        self.diverged = torch.zeros(len(ens.conditions), ens.num_seeds, dtype=torch.bool,
                                    device=device)
        # Read divergence flags back to the host only on the CPU, where it costs nothing.
        self._host_checks = device.type == "cpu"
        self._leaves = ens.parameters()
        # For each leaf, which condition it belongs to (to freeze diverged members).
        self._leaf_condition = [
            i
            for i, c in enumerate(ens.conditions)
            for p in ens.params[c].values()
            if p.requires_grad
        ]
        self._graph = self._graph_runner(device)

    def _graph_runner(self, device: torch.device) -> GraphedStep | None:
        """The CUDA-graph runner of :meth:`step`, if ``graphed`` asks for one and it is possible."""
        if self.graphed is False:
            return None
        why_not = None
        if device.type != "cuda":
            why_not = f"CUDA graphs need a CUDA ensemble, this one is on {device}"
        elif not self.optimizer.supports_graph_capture(self._leaves):
            why_not = (f"{type(self.optimizer).__name__} cannot be recorded in a CUDA graph "
                       "(use a fused FunctionalAdam)")
        if why_not is not None:
            if self.graphed:
                raise ValueError(f"graphed: {why_not}")
            return None
        self.optimizer.hold_lr_in_tensor(device)
        return GraphedStep(lambda x, y: self._update(x, y, {}), device,
                           before_replay=self.optimizer.before_replay)

    def step(
        self,
        x: Tensor | Mapping[str, Tensor],
        y: Tensor | Mapping[str, Tensor] | None,
        *,
        return_grads: bool = False,
        **kwargs: Any,
    ) -> StepOutput:
        """One optimisation step of every member on its batch; returns losses before the update."""
        ens = self.ensemble
        if self._graph is not None and not kwargs:
            losses, grads = self._graphed_update(x, y)
            # A replay's outputs are the graph's own tensors: keep copies.
            losses = {c: t.clone() for c, t in losses.items()}
            if return_grads:
                grads = [None if g is None else g.clone() for g in grads]
        else:
            losses, grads = self._update(x, y, kwargs)
        self.steps_done += 1
        grad_dict = None
        if return_grads:
            grad_dict, k = {}, 0
            for c in ens.conditions:
                grad_dict[c] = {}
                for name, p in ens.params[c].items():
                    if p.requires_grad:
                        grad_dict[c][name] = grads[k]
                        k += 1
        return StepOutput(losses, grad_dict)

    def _update(self, x: Any, y: Any, kwargs: dict[str, Any]
                ) -> tuple[dict[str, Tensor], list[Tensor | None]]:
        """Losses, gradients and the optimizer update of one step (what a graph records)."""
        ens = self.ensemble
        losses = ens.losses(self.loss_fn, x, y, inputs=self.inputs, **kwargs)
        stacked = torch.stack([losses[c] for c in ens.conditions])  # (C, S)
        finite = torch.isfinite(stacked.detach())
        newly = ~finite & ~self.diverged
        self.diverged |= newly
        # Summing the members' losses gives each member exactly its own gradient.
        total = torch.where(finite, stacked, torch.zeros_like(stacked)).sum()
        grads = list(torch.autograd.grad(total, self._leaves, allow_unused=True))
        frozen = self._freeze_diverged(grads) if self._any_diverged() else []
        self.optimizer.step(self._leaves, grads)
        with torch.no_grad():
            for i, saved, dead in frozen:
                self._leaves[i].copy_(torch.where(dead, saved, self._leaves[i]))
        return {c: losses[c].detach() for c in ens.conditions}, grads

    def _graphed_update(self, x: Any, y: Any) -> tuple[dict[str, Tensor], list[Tensor | None]]:
        """:meth:`_update` through the graph runner; if recording fails under ``graphed=None``,
        warn once and go on eagerly (a recording runs nothing, so no state has moved)."""
        try:
            return self._graph(x, y)
        except GraphCaptureError as error:
            if self.graphed:
                raise
            warnings.warn(f"{error}; training on without CUDA graphs", RuntimeWarning,
                          stacklevel=3)
            self._graph = None
            return self._update(x, y, {})

    def fit(self, steps: int, batch: Callable[[int], tuple[Any, Any]],
            callbacks: Sequence[Callback] = (), *,
            progress: Callable[..., Any] = lambda it, **_: it) -> None:
        """Train until ``steps`` updates are done, firing ``callbacks`` on their schedules.

        ``batch(step) -> (x, y)`` gives the inputs of the update after ``step`` updates.
        Callbacks fire at 0 (before the first update) and after each update, with the
        members' losses of that update, condition by condition (a ``(members,)`` tensor);
        gradients are kept (:meth:`last_member_grads`) only for updates a callback asks for.
        A callback's stop request (:meth:`Callback.request_stop`) ends training after the
        update it was made at, as in :class:`~actlab.train.loop.Trainer`.
        """
        for callback in callbacks:
            callback.rank = 0
        stopped = self.steps_done == 0 and fire(callbacks, "on_step", self, 0, None)
        for step in progress(range(self.steps_done, steps)):
            if stopped:
                break
            x, y = batch(step)
            want = any(c.wants_grads(step + 1) for c in callbacks)
            self.last_output = self.step(x, y, return_grads=want)
            losses = torch.cat([self.last_output.losses[c] for c in self.ensemble.conditions])
            stopped = fire(callbacks, "on_step", self, step + 1, losses)
        for callback in callbacks:
            callback.on_end(self)

    def last_member_grads(self) -> Tensor:
        """The last step's gradients as ``(members, P)``, condition by condition (members of
        every condition must have the same parameter count)."""
        grads = self.last_output.grads if self.last_output is not None else None
        if grads is None:
            raise RuntimeError("no gradients kept: a callback must ask for them (wants_grads)")
        seeds = self.ensemble.num_seeds
        return torch.cat([torch.cat([g.reshape(seeds, -1) for g in grads[c].values()], dim=1)
                          for c in self.ensemble.conditions])

    def freeze(self, condition: str, seed_index: int) -> None:
        """Stop updating one member from the next step on, as if it had diverged.

        For callers with their own stopping rule (e.g. a non-finite evaluation cost): the
        member is marked in :attr:`diverged` and its parameters stay where they are.
        """
        if condition not in self.ensemble.conditions:
            raise ValueError(f"condition: unknown {condition!r} (have {self.ensemble.conditions})")
        if not 0 <= seed_index < self.ensemble.num_seeds:
            raise ValueError(f"seed_index: must be in [0, {self.ensemble.num_seeds}), "
                             f"got {seed_index}")
        self.diverged[self.ensemble.conditions.index(condition), seed_index] = True

    def _any_diverged(self) -> bool:
        """Whether to run the freezing step: on the CPU only if a member has diverged; on an
        accelerator always (masks only), since reading the flag would wait for the device."""
        return bool(self.diverged.any()) if self._host_checks else True

    def _freeze_diverged(self, grads: list[Tensor | None]) -> list[tuple[int, Tensor, Tensor]]:
        """Zero diverged members' gradients (in ``grads``) and remember their parameters.

        Returns ``(leaf index, saved tensor, member mask)`` triples to restore after the
        update, since Adam still moves a parameter with zero gradient through its momentum.
        """
        frozen = []
        for i, (leaf, cond) in enumerate(zip(self._leaves, self._leaf_condition)):
            if self._host_checks and not self.diverged[cond].any():
                continue
            dead = self.diverged[cond].view(-1, *([1] * (leaf.dim() - 1)))
            if grads[i] is not None:
                grads[i] = torch.where(dead, torch.zeros_like(grads[i]), grads[i])
            frozen.append((i, leaf.detach().clone(), dead))
        return frozen


def count_step_flops(model: nn.Module, loss_fn: LossFn, x: Tensor, y: Tensor | None) -> int:
    """FLOPs of one forward + backward of ``model`` on ``(x, y)`` (matmul-type ops, as counted
    by :class:`torch.utils.flop_counter.FlopCounterMode`)."""
    from torch.utils.flop_counter import FlopCounterMode

    model = copy.deepcopy(model)
    with FlopCounterMode(display=False) as counter:
        loss = loss_fn(model(x), y)
        loss.backward()
    return int(counter.get_total_flops())
