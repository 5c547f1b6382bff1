"""The cost of a run before it starts: ``actlab plan EXPERIMENT [--paper]``.

Every unit of the run's plan (:func:`actlab.runner.plan.make_plan`) lists what one seed
trains (:meth:`~actlab.runner.experiment.Experiment.workloads`: a :class:`Workload` per kind
of model). Each model is built on the ``meta`` device (no memory, no arithmetic) and run
forward once on an example batch, which gives

* **parameters**: distinct trainable and frozen parameters (a tied weight once);
* **FLOPs per step** (:data:`FLOP_CONVENTION`): the forward pass's matrix products,
  convolutions and attention counted by :mod:`actlab.nn.flops` (a multiply-add is two
  FLOPs), times 3 for forward + backward (the backward computes two products of the same
  size per forward product: the gradient of the input and of the weight), at the global
  batch; FLOPs of evaluation and sampling (``eval_samples`` forward passes of one sample) at
  1x; total = steps x FLOPs per step x models, plus evaluation;
* **memory per GPU** (:data:`MEMORY_CONVENTION`): float32 weights, gradients, the optimizer's
  state, an EMA copy where the recipe keeps one, and the activations autograd saves in one
  forward pass at the per-GPU batch (measured, :func:`actlab.nn.flops.saved_activation_bytes`);
* **checkpoint disk**: one resumable checkpoint per model (weights, optimizer state, EMA) in
  float32;
* **GPU-hours** on a named :class:`Accelerator` at a model-FLOPs utilisation (MFU): total
  FLOPs / (peak x MFU) / 3600.

The peaks are the vendors' dense bfloat16 tensor-core figures (:data:`ACCELERATORS`, each with
its source); the default MFU 0.4 is ours (a well-tuned transformer run on such GPUs reaches
roughly that; small models and CPU-bound data pipelines reach less). No measured time enters
the plan: it is arithmetic on the model's shapes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

__all__ = ["ACCELERATORS", "DEFAULT_ACCELERATOR", "DEFAULT_MFU", "FLOP_CONVENTION",
           "MEMORY_CONVENTION", "Accelerator", "CostPlan", "Workload", "WorkloadCost",
           "optimizer_state_bytes", "plan_cost", "price"]

FLOP_CONVENTION = ("a multiply-add is 2 FLOPs; matrix products, convolutions and attention "
                   "only (bias adds, norms, activations and softmax not counted); a training "
                   "step is 3x the forward pass (the backward pass's two products per forward "
                   "product); evaluation and sampling forward passes count 1x")
MEMORY_CONVENTION = ("per GPU: float32 weights (4 B/parameter), gradients (4 B), optimizer "
                     "state (Adam/AdamW 8 B, SGD momentum 4 B, SGD 0, Muon 4 B on its matrices "
                     "and 8 B on the rest), an EMA copy (4 B) where the recipe keeps one, and "
                     "the activations autograd saves in one forward pass at the per-GPU batch, "
                     "measured on the meta device in float32 (each storage once; temporaries, "
                     "workspace and fragmentation come on top; bfloat16 autocast stores the "
                     "matrix products' outputs in 2 bytes, so less)")
DEFAULT_MFU = 0.4  # ours: see the module docstring
BYTES = 4  # float32 weights, gradients, states


@dataclass(frozen=True)
class Accelerator:
    """A GPU: its dense bfloat16 tensor-core peak (FLOP/s), its memory (GB) and the source."""

    name: str
    peak_flops: float
    memory_gb: float
    source: str


ACCELERATORS: dict[str, Accelerator] = {
    "h100": Accelerator("NVIDIA H100 SXM", 989.5e12, 80.0,
                        "NVIDIA H100 Tensor Core GPU datasheet: BF16 Tensor Core 1,979 TFLOPS "
                        "with sparsity, half of it dense; 80 GB"),
    "h100-pcie": Accelerator("NVIDIA H100 PCIe", 756.5e12, 80.0,
                             "NVIDIA H100 Tensor Core GPU datasheet: BF16 Tensor Core 1,513 "
                             "TFLOPS with sparsity, half of it dense; 80 GB"),
    "h200": Accelerator("NVIDIA H200 SXM", 989.5e12, 141.0,
                        "NVIDIA H200 Tensor Core GPU datasheet: BF16 Tensor Core 1,979 TFLOPS "
                        "with sparsity, half of it dense; 141 GB (the GPU of \"Bug or "
                        "Feature²\" App. D.1's DiT runs)"),
    "a100": Accelerator("NVIDIA A100 SXM 80GB", 312e12, 80.0,
                        "NVIDIA A100 Tensor Core GPU datasheet: BF16 Tensor Core 312 TFLOPS "
                        "dense (624 with sparsity); 80 GB (the GPU of \"Bug or Feature²\" App. "
                        "D.1's MaxViT runs)"),
}
DEFAULT_ACCELERATOR = "h100"


@dataclass
class Workload:
    """One kind of model that one seed of a unit trains.

    ``build()`` returns the model (called with ``torch.device("meta")`` as the default
    device); ``example(n)`` the forward arguments for ``n`` samples (meta tensors), run as
    ``call(model, *args)`` (default ``model(*args)``). ``batch`` samples per update over all
    GPUs, ``steps`` updates, ``optimizer`` a name of :data:`~actlab.train.optim.TRAINER_OPTIMIZERS`.
    ``models``: how many such models a seed trains (two students, three norms ...);
    ``together``: whether all of a unit's models and seeds train at once on one device
    (a vmapped ensemble) rather than one after another. ``eval_samples``: forward passes of
    one sample outside training over the run (evaluation sets, sampling steps).
    ``trained=False``: a fixed model that only runs forward (a teacher): its
    ``eval_samples`` are all its cost, and it holds weights only.
    """

    label: str
    build: Callable[[], nn.Module]
    example: Callable[[int], tuple]
    steps: int
    batch: int
    optimizer: str
    models: int = 1
    together: bool = False
    ema: bool = False
    eval_samples: int = 0
    sample: str = "sample"
    call: Callable[..., Any] | None = None
    trained: bool = True


@dataclass
class WorkloadCost:
    """What :func:`price` found for one workload of one unit (numbers per model unless said)."""

    unit: str
    label: str
    models: int  # models of the unit (models per seed x seeds)
    params: int
    forward_flops_per_sample: float
    flops_per_step: float  # one model, global batch, forward + backward
    steps: int
    batch: int
    per_gpu_batch: int
    total_flops: float  # all models of the unit, training and evaluation
    weights_gb: float
    gradients_gb: float
    optimizer_gb: float
    ema_gb: float
    activations_gb: float
    resident: int  # models on one GPU at once (an ensemble's members, else 1)
    memory_gb: float  # per GPU, all resident models
    checkpoint_gb: float  # all models of the unit
    gpu_hours: float
    sample: str = "sample"


@dataclass
class CostPlan:
    """The priced plan: one :class:`WorkloadCost` per unit and workload, and the totals."""

    experiment: str
    scale: str
    accelerator: Accelerator
    mfu: float
    nproc: int
    rows: list[WorkloadCost] = field(default_factory=list)

    @property
    def totals(self) -> dict[str, float]:
        """Sums over the rows (memory: the largest per GPU)."""
        return {
            "models": sum(r.models for r in self.rows),
            "total_flops": sum(r.total_flops for r in self.rows),
            "gpu_hours": sum(r.gpu_hours for r in self.rows),
            "checkpoint_gb": sum(r.checkpoint_gb for r in self.rows),
            "max_memory_gb": max((r.memory_gb for r in self.rows), default=0.0),
            "wall_hours": sum(r.gpu_hours for r in self.rows) / self.nproc,
        }

    def as_dict(self) -> dict[str, Any]:
        """The JSON of ``actlab plan --json``."""
        return {
            "experiment": self.experiment,
            "scale": self.scale,
            "accelerator": asdict(self.accelerator),
            "mfu": self.mfu,
            "nproc": self.nproc,
            "flop_convention": FLOP_CONVENTION,
            "memory_convention": MEMORY_CONVENTION,
            "units": [asdict(r) for r in self.rows],
            "total": self.totals,
        }

    def table(self) -> list[str]:
        """The terminal table: one line per unit and workload, then the totals."""
        head = (f"{'unit':40s} {'models':>6s} {'params':>8s} {'GFLOP/step':>11s} {'steps':>8s} "
                f"{'total FLOP':>10s} {'GB/GPU':>7s} {'w+g+o+e | act':>17s} {'ckpt GB':>8s} "
                f"{'GPU-h':>9s}")
        lines = [head, "-" * len(head)]
        for r in self.rows:
            name = r.unit if not r.label else f"{r.unit} {r.label}"
            state = r.resident * (r.weights_gb + r.gradients_gb + r.optimizer_gb + r.ema_gb)
            act = r.resident * r.activations_gb
            lines.append(
                f"{name[:40]:40s} {r.models:6d} {_count(r.params):>8s} "
                f"{r.flops_per_step / 1e9:11.4g} {r.steps:8d} {_sci(r.total_flops):>10s} "
                f"{r.memory_gb:7.3g} {f'{state:.3g} | {act:.3g}':>17s} "
                f"{r.checkpoint_gb:8.3g} {r.gpu_hours:9.4g}")
        t = self.totals
        lines.append("-" * len(head))
        lines.append(f"{'total':40s} {int(t['models']):6d} {'':8s} {'':11s} {'':8s} "
                     f"{_sci(t['total_flops']):>10s} {t['max_memory_gb']:7.3g} {'':17s} "
                     f"{t['checkpoint_gb']:8.3g} {t['gpu_hours']:9.4g}")
        a = self.accelerator
        lines += [
            f"GPU-hours on {a.name} at {a.peak_flops / 1e12:g} TFLOP/s bf16 dense peak "
            f"({a.source}) x MFU {self.mfu:g}; wall {t['wall_hours']:.4g} h on "
            f"{self.nproc} GPU(s) (units one after another).",
            f"FLOPs: {FLOP_CONVENTION}.",
            f"Memory {MEMORY_CONVENTION}; GB/GPU = weights + gradients + optimizer + EMA, "
            f"then activations, of the models resident at once.",
        ]
        if t["max_memory_gb"] > a.memory_gb:
            lines.append(f"note: a unit needs {t['max_memory_gb']:.3g} GB per GPU, more than "
                         f"the {a.memory_gb:g} GB of {a.name}: more GPUs (--nproc) split the "
                         f"batch.")
        return lines


def _count(n: int) -> str:
    for size, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if n >= size:
            return f"{n / size:.4g}{suffix}"
    return str(n)


def _sci(x: float) -> str:
    return f"{x:.3e}"


def optimizer_state_bytes(model: nn.Module, optimizer: str) -> int:
    """Bytes of the optimizer's state for ``model`` in float32 (:data:`MEMORY_CONVENTION`)."""
    params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if optimizer in ("adam", "adamw"):
        return 2 * BYTES * params
    if optimizer in ("momentum", "nesterov"):
        return BYTES * params
    if optimizer == "sgd":
        return 0
    if optimizer == "muon":
        from actlab.train.muon import muon_split

        matrices, rest = muon_split(model)
        return (BYTES * sum(p.numel() for _, p in matrices)
                + 2 * BYTES * sum(p.numel() for _, p in rest))
    raise ValueError(f"unknown optimizer {optimizer!r} for the optimizer-state estimate")


@dataclass(frozen=True)
class _Measured:
    """What one forward pass on the meta device gives (per model)."""

    params: int
    trainable: int
    state_bytes: int
    forward: float  # FLOPs of the forward pass at ``micro`` samples
    saved: int  # bytes autograd saves at ``micro`` samples
    micro: int


def _measure(workload: Workload, nproc: int) -> _Measured:
    from actlab.nn.flops import forward_cost

    with torch.device("meta"):
        model = workload.build()
    micro = max(1, math.ceil(workload.batch / nproc))
    with torch.device("meta"):
        args = workload.example(micro)
    forward, saved = forward_cost(model, *args, call=workload.call)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    states = optimizer_state_bytes(model, workload.optimizer) if workload.trained else 0
    return _Measured(sum(p.numel() for p in model.parameters()), trainable, states, forward,
                     saved, micro)


def price(workload: Workload, *, unit: str, seeds: int, accelerator: Accelerator,
          mfu: float, nproc: int = 1, measured: _Measured | None = None) -> WorkloadCost:
    """The cost of ``workload`` for a unit of ``seeds`` seeds (module docstring);
    ``measured`` reuses the forward pass of an identical workload."""
    if not 0 < mfu <= 1:
        raise ValueError(f"mfu must be in (0, 1], got {mfu}")
    if nproc < 1:
        raise ValueError(f"nproc must be >= 1, got {nproc}")
    m = measured or _measure(workload, nproc)
    per_sample = m.forward / m.micro
    trained = workload.trained
    flops_per_step = 3 * per_sample * workload.batch if trained else 0.0
    models = workload.models * seeds
    total = models * (flops_per_step * workload.steps + per_sample * workload.eval_samples)
    gb = 1e9
    weights = BYTES * m.params / gb
    gradients = BYTES * m.trainable / gb if trained else 0.0
    states = m.state_bytes / gb
    ema = weights if workload.ema else 0.0
    activations = m.saved / gb if trained else 0.0
    resident = models if workload.together else 1
    return WorkloadCost(
        unit=unit, label=workload.label, models=models, params=m.params,
        forward_flops_per_sample=per_sample, flops_per_step=flops_per_step,
        steps=workload.steps, batch=workload.batch, per_gpu_batch=m.micro, total_flops=total,
        weights_gb=weights, gradients_gb=gradients, optimizer_gb=states, ema_gb=ema,
        activations_gb=activations, resident=resident,
        memory_gb=resident * (weights + gradients + states + ema + activations),
        checkpoint_gb=models * (weights + states + ema) if trained else 0.0,
        gpu_hours=total / (accelerator.peak_flops * mfu) / 3600, sample=workload.sample)


def _unit_label(point: dict[str, Any], unit: dict[str, Any], seeds: tuple[int, ...],
                all_seeds: list[int]) -> str:
    """``lr=0.1 relu/shifted seed 0``: grid point, the unit's values, its seeds."""
    from actlab.runner.plan import point_label

    parts = [point_label(point), "/".join(str(v) for v in unit.values())]
    if len(seeds) != len(all_seeds):
        parts.append(f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {seeds[0]}-{seeds[-1]}")
    return " ".join(p for p in parts if p) or "all"


def plan_cost(plan: Any, *, accelerator: Accelerator | str = DEFAULT_ACCELERATOR,
              mfu: float = DEFAULT_MFU, nproc: int = 1) -> CostPlan:
    """Price every unit of ``plan`` (a :class:`~actlab.runner.plan.Plan`)."""
    from actlab.errors import ConfigError, did_you_mean

    if isinstance(accelerator, str):
        if accelerator not in ACCELERATORS:
            hint = did_you_mean(accelerator, ACCELERATORS, fallback=True, prefix="; ")
            raise ConfigError("--accelerator", f"unknown accelerator {accelerator!r}{hint}")
        accelerator = ACCELERATORS[accelerator]
    experiment = plan.experiment
    out = CostPlan(experiment.name, plan.scale, accelerator, mfu, nproc)
    measured: dict[str, _Measured] = {}  # units that differ only in seeds build one model
    for planned in plan.units:
        config = plan.config_for(planned.point)
        try:
            workloads = experiment.workloads(config, dict(planned.unit))
        except NotImplementedError as exc:
            raise ConfigError("experiment", str(exc)) from None
        label = _unit_label(planned.point, planned.unit, planned.seeds, plan.seeds)
        for i, workload in enumerate(workloads):
            key = json.dumps([planned.point, planned.unit, i], sort_keys=True, default=str)
            if key not in measured:
                measured[key] = _measure(workload, nproc)
            out.rows.append(price(workload, unit=label, seeds=len(planned.seeds),
                                  accelerator=accelerator, mfu=mfu, nproc=nproc,
                                  measured=measured[key]))
    return out
