"""What a user would otherwise reach for to watch activations, as benchmark conditions.

Each condition is an object with ``after_step()`` (called after ``optimizer.step()``, like
``Probe.step``) and ``close()``, recording at the same interval as the probe:

* :class:`ProbeCondition`: ``actlab.Probe`` with its default metrics;
* :class:`ItemHooks`: forward hooks on every activation site that compute the mean, the
  share of negative inputs and the sparsity and read each with ``.item()`` (a host sync per
  statistic) on recorded steps; with ``full=True`` the same eight forward statistics per site
  the probe records (pre-activation mean, std and negative share; activation mean, std, max,
  min and sparsity), so the two compare like for like on the activations;
* :class:`WandbWatch`: ``wandb.watch(model, log="all", log_freq=every)`` in an offline run
  (``None`` from :func:`wandb_condition` if wandb cannot be imported).
"""

from __future__ import annotations

import os
import tempfile
import warnings
from typing import Any, ClassVar

import torch
from torch import nn

import actlab


class Plain:
    """No measurement at all: the baseline."""

    def after_step(self) -> None:
        """Nothing to do."""

    def close(self) -> None:
        """Nothing to release."""


class ProbeCondition:
    """``actlab.Probe`` with its default metrics and the residual blocks registered."""

    def __init__(self, model: nn.Module, every: int, blocks: list[str] | None = None) -> None:
        with warnings.catch_warnings():  # a compiled model's note on backward metrics
            warnings.simplefilter("ignore")
            self.probe = actlab.Probe(model, every=every, blocks=blocks)

    def after_step(self) -> None:
        """Close the probe's step."""
        self.probe.step()

    def close(self) -> None:
        """Read the table (the probe's only host transfer is part of its cost) and close."""
        self.rows = len(self.probe.table())
        self.probe.close()


class ItemHooks:
    """Forward hooks reading mean, negative share and sparsity (``full``: the probe's eight
    forward statistics) with ``.item()``."""

    def __init__(self, model: nn.Module, every: int, eps: float = 1e-7,
                 full: bool = False) -> None:
        self.every, self.eps, self.step, self.on, self.full = every, eps, 0, True, full
        self.rows: list[tuple[Any, ...]] = []
        root = getattr(model, "_orig_mod", model)
        root = getattr(root, "module", root)  # DDP
        self.handles = [site.register_forward_hook(self._hook(name))
                        for name, site in actlab.find_activations(root).items()]

    def _hook(self, name: str) -> Any:
        def hook(module: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
            if self.on:  # a bool, not the step: a compiled model guards on it
                p, a = inputs[0].detach(), output.detach()
                row = [a.mean().item(), (p < 0).float().mean().item(),
                       (a.abs() < self.eps).float().mean().item()]
                if self.full:
                    row += [p.mean().item(), p.std(correction=0).item(),
                            a.std(correction=0).item(), a.max().item(), a.min().item()]
                self.rows.append((self.step, name, *row))
        return hook

    def after_step(self) -> None:
        """Advance the step; record the next one if it is on the interval."""
        self.step += 1
        self.on = self.step % self.every == 0

    def close(self) -> None:
        """Remove the hooks."""
        for handle in self.handles:
            handle.remove()


class WandbWatch:
    """``wandb.watch(model, log="all", log_freq=every)`` in the process's offline run.

    wandb's hooks log to the global ``wandb.run``, so all watchers of a process share one run,
    finished when the last of them closes.
    """

    _open: ClassVar[int] = 0

    def __init__(self, wandb: Any, model: nn.Module, every: int) -> None:
        self.wandb = wandb
        if wandb.run is None:
            wandb.init(mode="offline", dir=tempfile.mkdtemp(prefix="probe_overhead_wandb_"),
                       project="probe-overhead", settings=wandb.Settings(silent=True))
        WandbWatch._open += 1
        self.model = model
        wandb.watch(model, log="all", log_freq=every)

    def after_step(self) -> None:
        """Commit the step's row (what ``wandb.log`` after each step does)."""
        self.wandb.log({})

    def close(self) -> None:
        """Unwatch; the last watcher finishes the offline run."""
        self.wandb.unwatch([self.model])
        WandbWatch._open -= 1
        if WandbWatch._open == 0:
            self.wandb.finish()


def wandb_condition(model: nn.Module, every: int) -> WandbWatch | None:
    """A :class:`WandbWatch`, or ``None`` (with a printed note) if wandb cannot be used."""
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("WANDB_SILENT", "true")
    try:
        import wandb
    except ImportError as err:
        print(f"wandb: skipped ({err})")
        return None
    return WandbWatch(wandb, model, every)
