"""Functional Adam and SGD over stacked parameters (leading dimension = ensemble member).

Every update here is elementwise, so applying it to a tensor that stacks N members'
parameters gives each member exactly the update ``torch.optim.Adam`` / ``torch.optim.SGD``
would give it alone. SGD, and Adam with ``fused=False``, follow PyTorch's single-tensor (CPU
default) implementations operation by operation; Adam by default calls PyTorch's own fused
kernel. Either way an ensemble matches a loop of ordinary optimizers to rounding.

The optimizers update the given tensors in place (they are the ensemble's own leaves,
created for that purpose), and keep their state in plain tensors so that a state dict
can be saved and restored.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor


def _check_hyper(name: str, value: float, low: float = 0.0, high: float | None = None) -> None:
    if not isinstance(value, (int, float)) or math.isnan(value) or value < low:
        raise ValueError(f"{name}: must be a number >= {low}, got {value!r}")
    if high is not None and value >= high:
        raise ValueError(f"{name}: must be < {high}, got {value!r}")


class FunctionalOptimizer:
    """Base class: ``step(params, grads)`` updates ``params`` in place (under ``no_grad``)."""

    def step(self, params: Sequence[Tensor], grads: Sequence[Tensor | None]) -> None:
        """Apply one update to ``params`` given their ``grads`` (``None`` grads are skipped)."""
        raise NotImplementedError

    def state_dict(self) -> dict:
        """The optimizer state (tensors are referenced, not copied)."""
        raise NotImplementedError

    def load_state_dict(self, state: dict) -> None:
        """Restore a state produced by :meth:`state_dict`."""
        raise NotImplementedError

    # CUDA-graph support (see :mod:`actlab.train.graphed`). A graph replays the kernels it
    # recorded with the arguments they had, so an optimizer that can be captured keeps every
    # value that may change between steps (learning rate, step count) in a device tensor.

    def supports_graph_capture(self, params: Sequence[Tensor]) -> bool:
        """Whether :meth:`step` on ``params`` can be recorded in a CUDA graph."""
        return False

    def hold_lr_in_tensor(self, device: torch.device | str) -> None:
        """Keep the learning rate in a tensor on ``device`` from now on; assigning ``lr``
        still works (the tensor follows it before the next update)."""
        raise NotImplementedError(f"{type(self).__name__} cannot keep its learning rate "
                                  "in a tensor")

    def before_replay(self) -> None:
        """Host bookkeeping before a recorded :meth:`step` replays (it does not run again)."""


@dataclass
class FunctionalAdam(FunctionalOptimizer):
    """Adam (``decoupled=True``: AdamW) over stacked parameters, as torch.optim.Adam computes it.

    Args:
        lr, betas, eps, weight_decay: as in :class:`torch.optim.Adam`.
        decoupled: apply ``weight_decay`` as AdamW does (multiplicative, before the moments).
        fused: use PyTorch's fused Adam kernel (one vectorised pass per tensor instead of
            five elementwise ops). ``None`` (default) uses it whenever every tensor is a
            floating-point tensor on a device that has the kernel (CPU, CUDA); ``False``
            always uses the op-by-op update. Both agree to rounding; the op-by-op update
            reproduces ``torch.optim.Adam``'s default CPU implementation bit for bit.
    """

    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0
    decoupled: bool = False
    fused: bool | None = None
    steps: int = 0
    exp_avg: list[Tensor] = field(default_factory=list, repr=False)
    exp_avg_sq: list[Tensor] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        _check_hyper("lr", self.lr)
        _check_hyper("betas[0]", self.betas[0], 0.0, 1.0)
        _check_hyper("betas[1]", self.betas[1], 0.0, 1.0)
        _check_hyper("eps", self.eps)
        _check_hyper("weight_decay", self.weight_decay)
        # Per-tensor step counts as the fused kernel wants them (it increments them itself,
        # and reads them from the parameters' device).
        self._step_tensors: list[Tensor] = []
        self._lr_tensor: Tensor | None = None
        self._lr_in_tensor: float | None = None  # the value last written to _lr_tensor

    @torch.no_grad()
    def step(self, params: Sequence[Tensor], grads: Sequence[Tensor | None]) -> None:
        """One Adam update of every tensor in ``params`` (in place)."""
        if not self.exp_avg:
            self.exp_avg = [torch.zeros_like(p) for p in params]
            self.exp_avg_sq = [torch.zeros_like(p) for p in params]
        if len(params) != len(self.exp_avg):
            raise ValueError(f"expected {len(self.exp_avg)} parameter tensors, got {len(params)}")
        # The fused kernel reads its step counts on the parameters' device (as
        # torch.optim.Adam(fused=True) keeps them); the op-by-op update reads them on the host.
        fused = self._use_fused(params)
        device = params[0].device if fused else torch.device("cpu")
        if len(self._step_tensors) != len(params):
            self._step_tensors = [torch.tensor(float(self.steps), device=device) for _ in params]
        elif self._step_tensors and self._step_tensors[0].device != device:
            self._step_tensors = [t.to(device) for t in self._step_tensors]
        # A graph being recorded runs nothing now: each replay counts itself and brings the
        # learning rate up to date (before_replay).
        if not _capturing(self._lr_tensor):
            self._sync_lr()
            self.steps += 1
        live = [i for i, g in enumerate(grads) if g is not None]
        if fused:
            self._fused_step(params, grads, live)
        else:
            self._op_by_op_step(params, grads, live)

    def supports_graph_capture(self, params: Sequence[Tensor]) -> bool:
        """True for the fused kernel on CUDA (its step counts and learning rate can live on
        the device; the op-by-op update reads the step count on the host)."""
        return bool(params) and params[0].device.type == "cuda" and self._use_fused(params)

    def hold_lr_in_tensor(self, device: torch.device | str) -> None:
        """Pass the learning rate to the fused kernel as a float32 tensor on ``device``."""
        self._lr_tensor = torch.tensor(float(self.lr), dtype=torch.float32, device=device)
        self._lr_in_tensor = self.lr

    def before_replay(self) -> None:
        """Bring the learning-rate tensor up to date and count the update about to replay."""
        self._sync_lr()
        self.steps += 1

    def _sync_lr(self) -> None:
        """Write ``lr`` into the learning-rate tensor if it changed (an asynchronous fill)."""
        if self._lr_tensor is not None and self._lr_in_tensor != self.lr:
            _check_hyper("lr", self.lr)
            self._lr_tensor.fill_(float(self.lr))
            self._lr_in_tensor = self.lr

    def _use_fused(self, params: Sequence[Tensor]) -> bool:
        if self.fused is False or not params:
            return False
        device = params[0].device.type
        return device in ("cpu", "cuda") and all(
            p.is_floating_point() and p.is_contiguous() and p.device.type == device
            and p.dtype == params[0].dtype
            for p in params
        )

    def _fused_step(self, params: Sequence[Tensor], grads: Sequence[Tensor | None],
                    live: list[int]) -> None:
        from torch.optim.adam import adam

        pick = lambda seq: [seq[i] for i in live]  # noqa: E731
        # The fused CPU kernel reads memory linearly: it silently mis-pairs elements of a
        # non-contiguous gradient (vmap produces transposed ones), so make them dense.
        dense_grads = [grads[i].contiguous() for i in live]
        adam(
            pick(params), dense_grads, pick(self.exp_avg), pick(self.exp_avg_sq), [],
            pick(self._step_tensors), fused=True, decoupled_weight_decay=self.decoupled,
            amsgrad=False, beta1=self.betas[0], beta2=self.betas[1],
            lr=self._lr_tensor if self._lr_tensor is not None else self.lr,
            weight_decay=self.weight_decay, eps=self.eps, maximize=False,
        )

    def _op_by_op_step(self, params: Sequence[Tensor], grads: Sequence[Tensor | None],
                       live: list[int]) -> None:
        beta1, beta2 = self.betas
        for i in live:
            param, grad = params[i], grads[i]
            exp_avg, exp_avg_sq = self.exp_avg[i], self.exp_avg_sq[i]
            self._step_tensors[i] += 1
            step = float(self._step_tensors[i])
            bias_correction1 = 1 - beta1**step
            bias_correction2_sqrt = (1 - beta2**step) ** 0.5
            if self.weight_decay != 0:
                if self.decoupled:
                    param.mul_(1 - self.lr * self.weight_decay)
                else:
                    grad = grad.add(param, alpha=self.weight_decay)
            exp_avg.lerp_(grad, 1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(self.eps)
            param.addcdiv_(exp_avg, denom, value=-self.lr / bias_correction1)

    def state_dict(self) -> dict:
        """Step counts (overall and per tensor) and moment tensors."""
        return {
            "steps": self.steps,
            "tensor_steps": [int(t) for t in self._step_tensors],
            "exp_avg": self.exp_avg,
            "exp_avg_sq": self.exp_avg_sq,
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore step counts and moments (copied)."""
        self.steps = int(state["steps"])
        self.exp_avg = [t.clone() for t in state["exp_avg"]]
        self.exp_avg_sq = [t.clone() for t in state["exp_avg_sq"]]
        counts = state.get("tensor_steps") or [self.steps] * len(self.exp_avg)
        device = self.exp_avg[0].device if self.exp_avg else torch.device("cpu")
        self._step_tensors = [torch.tensor(float(c), device=device) for c in counts]


def _capturing(tensor: Tensor | None) -> bool:
    """Whether a CUDA graph is being recorded on the current stream of ``tensor``'s device
    (then host-side writes such as the learning-rate fill must stay out of the graph)."""
    return (tensor is not None and tensor.device.type == "cuda"
            and torch.cuda.is_current_stream_capturing())


@dataclass
class FunctionalSGD(FunctionalOptimizer):
    """SGD with optional (Nesterov) momentum over stacked parameters; same arithmetic as torch.optim.SGD."""

    lr: float = 1e-2
    momentum: float = 0.0
    dampening: float = 0.0
    weight_decay: float = 0.0
    nesterov: bool = False
    momentum_buffer: list[Tensor | None] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        _check_hyper("lr", self.lr)
        _check_hyper("momentum", self.momentum)
        _check_hyper("dampening", self.dampening)
        _check_hyper("weight_decay", self.weight_decay)
        if self.nesterov and (self.momentum <= 0 or self.dampening != 0):
            raise ValueError("nesterov: requires momentum > 0 and dampening = 0")

    @torch.no_grad()
    def step(self, params: Sequence[Tensor], grads: Sequence[Tensor | None]) -> None:
        """One SGD update of every tensor in ``params`` (in place)."""
        if not self.momentum_buffer:
            self.momentum_buffer = [None] * len(params)
        if len(params) != len(self.momentum_buffer):
            raise ValueError(
                f"expected {len(self.momentum_buffer)} parameter tensors, got {len(params)}"
            )
        for i, (param, grad) in enumerate(zip(params, grads)):
            if grad is None:
                continue
            if self.weight_decay != 0:
                grad = grad.add(param, alpha=self.weight_decay)
            if self.momentum != 0:
                buf = self.momentum_buffer[i]
                if buf is None:
                    buf = grad.detach().clone()
                    self.momentum_buffer[i] = buf
                else:
                    buf.mul_(self.momentum).add_(grad, alpha=1 - self.dampening)
                grad = grad.add(buf, alpha=self.momentum) if self.nesterov else buf
            param.add_(grad, alpha=-self.lr)

    def state_dict(self) -> dict:
        """Momentum buffers (``None`` before the first step)."""
        return {"momentum_buffer": self.momentum_buffer}

    def load_state_dict(self, state: dict) -> None:
        """Restore momentum buffers (copied)."""
        self.momentum_buffer = [None if b is None else b.clone() for b in state["momentum_buffer"]]
