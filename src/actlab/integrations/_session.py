"""What both training-loop callbacks share: a Probe over the host's model, stepped once per
optimizer step, and an optional curvature schedule on a held batch.

The callbacks only translate their host's events into :meth:`ProbeSession.begin`,
:meth:`ProbeSession.before_update`, :meth:`ProbeSession.optimizer_step` and
:meth:`ProbeSession.end`, and hand the returned ``{"actlab/<metric>/<layer>": value}`` dicts
to the host's own logging. The probe runs on every rank (its statistics merge across ranks
on each recorded step); only rank 0 returns values and measures curvature. Activation
statistics and curvature of a step describe the same parameters (those of that step's forward
pass, before its update) and carry the same step; the run's last step is always recorded.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from actlab.device import move_batch
from actlab.errors import ConfigError
from actlab.probe.probe import Probe
from actlab.probe.schedule import AlsoAt, as_schedule
from actlab.probe.writers import PREFIX, tag

__all__ = ["PREFIX", "Curvature", "ProbeSession", "key"]
CURVATURE_LAYER = "model"  # the layer name curvature values are logged under

LossOf = Callable[[nn.Module, Any], torch.Tensor]


@dataclass
class Curvature:
    """A λmax / Hessian-trace schedule on one held batch.

    Args:
        batch: the held batch, in the form the model's loss takes it (moved to the model's
            device when measured).
        every: measure after every ``every``-th optimizer step.
        loss: ``loss(model, batch) -> scalar``; ``None`` means ``model(**batch).loss`` (Hugging
            Face models with ``labels`` in the batch).
        top_k: number of top Hessian eigenvalues (``lambda_max`` is the first; further ones
            are logged as ``lambda_2`` ...).
        trace_samples: Hutchinson probes for ``hessian_trace`` (0: no trace).
        seed: seed of the callback's own ``torch.Generator``; the global RNG is never used.

    The model is put in ``eval()`` mode for the measurement (no dropout draws) and restored;
    parameters and ``.grad`` are never written (see :mod:`actlab.curvature.operators`).
    """

    batch: Any
    every: int = 100
    loss: LossOf | None = None
    top_k: int = 1
    trace_samples: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.every, int) or self.every < 1:
            raise ConfigError("curvature.every", f"must be an integer >= 1, got {self.every!r}")
        if self.top_k < 1:
            raise ConfigError("curvature.top_k", f"must be >= 1, got {self.top_k!r}")
        if self.trace_samples < 0:
            raise ConfigError("curvature.trace_samples",
                              f"must be >= 0, got {self.trace_samples!r}")


def hf_loss(model: nn.Module, batch: Mapping[str, Any]) -> torch.Tensor:
    """The loss a Hugging Face model computes itself from a batch holding ``labels``."""
    out = model(**batch)
    loss = out["loss"] if isinstance(out, Mapping) else getattr(out, "loss", None)
    if loss is None:
        raise ValueError("curvature: the model returned no loss for the held batch; put labels "
                         "in it or pass Curvature(loss=...)")
    return loss


class _LossModule(nn.Module):
    """``forward(batch) = loss(model, batch)``: lets the curvature operators (which take
    ``(x, y)`` pairs and ``loss_fn(output, y)``) work on any model and batch format."""

    def __init__(self, model: nn.Module, loss: LossOf) -> None:
        super().__init__()
        self.model = model
        self._loss = loss

    def forward(self, batch: Any) -> torch.Tensor:
        """The scalar loss of ``batch``."""
        return self._loss(self.model, batch)


def base_module(model: nn.Module) -> nn.Module:
    """The module under ``torch.compile`` / DDP wrappers (hooks and ``torch.func`` need it)."""
    while True:
        inner = getattr(model, "_orig_mod", None) or getattr(model, "module", None)
        if not isinstance(inner, nn.Module):
            return model
        model = inner


def measure_curvature(model: nn.Module, spec: Curvature, generator: torch.Generator,
                      parameters: Mapping[str, torch.Tensor] | None = None) -> dict[str, float]:
    """λmax (and top-k) and optionally the Hessian trace of ``spec.loss`` on the held batch,
    at ``parameters`` (by name; default: the model's own)."""
    from actlab.curvature import HessianOperator, hutchinson_trace, top_eigenvalues

    # A hook-free copy in eval mode: the probe's hooks must not see (or break under) the
    # torch.func passes, and eval() draws no dropout masks from the global RNG.
    model = _without_hooks(base_module(model)).eval()
    if parameters is not None:
        with torch.no_grad():
            for name, param in model.named_parameters():
                param.copy_(parameters[name])
    param = next(model.parameters())
    batch = move_batch(spec.batch, param.device)
    op = HessianOperator(_LossModule(model, spec.loss or hf_loss), lambda out, _: out,
                         [((batch,), torch.zeros(1))])  # (batch,): one argument, even a tuple
    # fused attention kernels have no second derivative; the math kernel has
    with sdpa_kernel(SDPBackend.MATH):
        values, _, _ = top_eigenvalues(op, spec.top_k, generator=generator)
        out = {"lambda_max": float(values[0])}
        out.update({f"lambda_{i + 1}": float(v) for i, v in enumerate(values[1:], start=1)})
        if spec.trace_samples:  # an estimate: its standard error goes with it
            trace = hutchinson_trace(op, spec.trace_samples, generator=generator)
            out["hessian_trace"] = trace.mean
            out["hessian_trace_stderr"] = trace.std_error
    return out


def _without_hooks(model: nn.Module) -> nn.Module:
    """A deep copy of ``model`` with every module hook removed (the original keeps its own)."""
    with torch.no_grad():
        clone = copy.deepcopy(model)
    for module in clone.modules():
        for hooks in (module._forward_hooks, module._forward_pre_hooks, module._backward_hooks,
                      module._backward_pre_hooks):
            hooks.clear()
    return clone


def _is_main() -> bool:
    """Rank 0 of the process group, or no process group."""
    return not (torch.distributed.is_available() and torch.distributed.is_initialized()) \
        or torch.distributed.get_rank() == 0


def one_line(step: int, logs: dict[str, float]) -> str:
    """The console's view of one record: how many values went to the trackers, and the
    curvature headline when there is one (the values themselves are in the trackers)."""
    layers = {name.rsplit("/", 1)[-1] for name in logs}
    text = f"actlab: step {step}: {len(logs)} values over {len(layers)} layers to the trackers"
    lam = logs.get(key("lambda_max", CURVATURE_LAYER))
    if lam is not None:
        text += f"; lambda_max {lam:.4g}"
    trace = logs.get(key("hessian_trace", CURVATURE_LAYER))
    if trace is not None:
        stderr = logs.get(key("hessian_trace_stderr", CURVATURE_LAYER), float("nan"))
        text += f"; Hessian trace {trace:.4g} +- {stderr:.2g}"
    return text


def key(metric: str, layer: str) -> str:
    """The logged name of one value: ``actlab/<metric>/<layer>``, as every probe writer
    logs it (:func:`actlab.probe.writers.tag`)."""
    return tag(layer, metric)


class _Collect:
    """A Probe writer that keeps the rows it is sent."""

    def __init__(self) -> None:
        self.frames: list[pd.DataFrame] = []

    def write(self, df: pd.DataFrame) -> None:
        self.frames.append(df)


class ProbeSession:
    """One training run's Probe and curvature schedule, driven by optimizer steps."""

    def __init__(self, *, every: Any, metrics: Iterable[str] | None, activations: Any,
                 curvature: Curvature | None, probe_kwargs: Mapping[str, Any]) -> None:
        self.every = every
        self.metrics = metrics
        self.activations = activations
        self.curvature = curvature
        self.probe_kwargs = dict(probe_kwargs)
        self.probe: Probe | None = None
        self.model: nn.Module | None = None
        self.steps = 0  # optimizer steps taken
        self.curvature_rows: list[tuple[int, str, str, float]] = []
        self._sink = _Collect()
        self._held: list[pd.DataFrame] = []  # rows of steps not yet closed
        self._generator: torch.Generator | None = None
        # the parameters of the step closing now, kept before its update when curvature is due
        self._parameters_now: dict[str, torch.Tensor] | None = None
        self.last_step: int | None = None

    def begin(self, model: nn.Module, max_steps: int | None = None) -> None:
        """Attach the probe to ``model`` (training starts). With ``max_steps`` (the run's
        optimizer steps) the last step is recorded too, whatever the schedule."""
        self.model = base_module(model)
        self.steps = 0
        self.last_step = max_steps - 1 if max_steps and max_steps > 0 else None
        schedule = as_schedule(self.every)
        if self.last_step is not None:
            schedule = AlsoAt(schedule, frozenset({self.last_step}))
        self.probe = Probe(self.model, every=schedule, activations=self.activations,
                           metrics=self.metrics, **self.probe_kwargs)
        if self.curvature is not None:
            self._generator = torch.Generator().manual_seed(self.curvature.seed)

    def before_update(self) -> None:
        """Gradients are ready, the update not yet applied: the parameters are those the
        probe saw in this step's forward pass. Read the reduced gradients (under a process
        group) and, when due, measure curvature here, so that a step's activation
        statistics and curvature describe the same parameters and carry the same step."""
        if self.probe is None:
            return
        if self.probe.distributed:
            self.probe.capture_grads()
        step = self.steps  # the 0-based step whose update comes next
        if self.curvature is not None and _is_main() and (
                step % self.curvature.every == 0 or step == self.last_step):
            # kept now, measured once the step closes (mid-step the modules may hold tensors
            # of the running graph, which a copy of the model cannot take)
            self._parameters_now = {name: param.detach().clone()
                                    for name, param in self.model.named_parameters()}

    def optimizer_step(self) -> dict[str, float]:
        """Close one optimizer step; the values due now, keyed ``actlab/<metric>/<layer>``."""
        if self.probe is None:
            return {}
        done = self.steps  # the 0-based probe step just closed
        self.probe.step()
        self.steps += 1
        logs = self._probe_values(done)
        if self._parameters_now is not None:
            measured = measure_curvature(self.model, self.curvature, self._generator,
                                         self._parameters_now)
            self._parameters_now = None
            for metric, value in measured.items():
                self.curvature_rows.append((done, CURVATURE_LAYER, metric, value))
                logs[key(metric, CURVATURE_LAYER)] = value
        return logs

    def _probe_values(self, step: int) -> dict[str, float]:
        # Only the rows recorded since the last call are read (the cost does not grow with
        # the run); weight rows of the next step are recorded when this one closes: keep them.
        if not self.probe.write(self._sink) and not self._held:
            return {}
        frames = self._held + self._sink.frames
        self._sink.frames = []
        rows = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
        later = rows["step"] > step
        self._held = [rows[later]] if later.any() else []
        now = rows[~later]
        return {key(m, layer): float(v)
                for m, layer, v in zip(now["metric"], now["layer"], now["value"])}

    def end(self) -> None:
        """Remove every hook (training ended); the recorded values stay in :meth:`table`."""
        if self.probe is not None:
            self.probe.close()

    def table(self) -> pd.DataFrame:
        """Probe rows plus curvature rows, both at the 0-based step whose parameters they
        measured (before that step's update), tidy columns."""
        parts = [self.probe.table()] if self.probe is not None else []
        if self.curvature_rows:
            parts.append(pd.DataFrame(self.curvature_rows,
                                      columns=["step", "layer", "metric", "value"]))
        if not parts:
            return pd.DataFrame(columns=["step", "layer", "metric", "value"])
        return pd.concat(parts, ignore_index=True)
