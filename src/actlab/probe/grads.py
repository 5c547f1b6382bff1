"""Weight gradients: read once the backward pass and the reductions that follow it are done.

A hook that fires when a parameter's gradient is accumulated would read, under DDP, the
local gradient before its all-reduce; FSDP2 assigns a shard's gradient after its
reduce-scatter without any hook firing; and reading ``.grad`` in ``Probe.step()`` finds
nothing when the loop calls ``optimizer.zero_grad()`` first (as the probe's own first example
does). So the probe reads every tracked weight's ``.grad`` in a callback queued on the
autograd engine at the end of each backward pass, *after* the callbacks queued during it:
DDP's reducer queues the callback that waits for its all-reduce and writes the averaged
gradients when the last bucket is ready, FSDP2 queues the one that waits for its
reduce-scatter when the backward starts. Queued callbacks run in order once the graph is
done, and a callback may queue another that runs after all of them, so the probe's first
callback only re-queues the reading one (:class:`AfterBackward`).

What fires it: the post-accumulate-grad hook of each tracked weight (which marks that
weight) and, when the model was called eagerly, a hook on the gradient of the model's
output (FSDP2's sharded weights fire no hook of their own). With gradient accumulation
each backward pass reads again and the last one, the accumulated (and reduced) gradient,
replaces the others. :meth:`ProbeGrads.capture_grads` reads ``.grad`` on demand (the
callbacks of the training frameworks call it before the optimizer step, after clipping).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from actlab.probe.hooks import _first_tensor, _Weight


def _queue(callback: Callable[[], None]) -> None:
    """Run ``callback`` when the autograd engine has finished the running backward pass."""
    torch.autograd.Variable._execution_engine.queue_callback(callback)


class AfterBackward:
    """Calls ``fn()`` once at the end of each backward pass that fired :meth:`trigger`,
    after every callback queued during that pass."""

    def __init__(self, fn: Callable[[], None]) -> None:
        self.fn = fn
        self._task = -1  # the graph task (backward pass) already queued for

    def trigger(self, *_: Any) -> None:
        """Queue the call for the running backward pass (once per pass); usable as a hook."""
        task = torch._C._current_graph_task_id()
        if task == -1 or task == self._task:  # outside a backward pass, or already queued
            return
        self._task = task
        _queue(lambda: _queue(self._run))  # re-queued: runs after the pass's own callbacks

    def _run(self) -> None:
        self._task = -1
        self.fn()


class ProbeGrads:
    """Reading the weight gradients of :class:`~actlab.probe.probe.Probe` (a mixin)."""

    def _attach_grad_hooks(self) -> None:
        """The post-accumulate-grad hooks that mark a weight and queue the reading."""
        if not self._want_wgrad:
            return
        for weight in self.weights:
            if weight.param.requires_grad and not weight.sharded:
                self._handles.append(
                    weight.param.register_post_accumulate_grad_hook(self._grad_hook(weight)))

    def _grad_hook(self, weight: _Weight) -> Callable:
        def hook(param: torch.Tensor) -> None:
            if not self._closed and self._recording:
                self._touched.add(weight)
                self._backward_end.trigger()
        return hook

    def _watch_backward(self, output: Any) -> None:
        """After an eager call of the model in a recorded step: queue the reading when the
        gradient reaches the output (also for weights whose own hook never fires)."""
        if not (self._want_wgrad and self._recording and torch.is_grad_enabled()):
            return
        out = _first_tensor(output)
        if out is not None and out.requires_grad:
            out.register_hook(self._backward_end.trigger)

    def _after_backward(self) -> None:
        """The end of a backward pass, its reductions done: file what traced hooks handed
        over and read the gradients of a recorded step."""
        touched, self._touched = self._touched, set()
        if self._closed:
            return
        self._harvest()
        if self._recording and self._want_wgrad:
            # one process: the weights this pass reached (as their hooks would); under a
            # process group every weight (the reduction fills those unused on this rank)
            self._read_grads(None if self.distributed else touched)

    def capture_grads(self) -> None:
        """Read the tracked weights' gradients now, for the step being recorded.

        Not needed in a plain loop: the probe reads the gradients at the end of every
        backward pass, after DDP's all-reduce or FSDP's reduce-scatter, whether
        ``optimizer.zero_grad()`` comes before or after :meth:`step`. Call it to read them
        later, e.g. after gradient clipping (the Hugging Face and Lightning callbacks do,
        before the optimizer step); it replaces what the backward pass read.
        """
        if self._closed or not self._recording or not self._want_wgrad:
            return
        self._read_grads(None)

    def _read_grads(self, only: set[_Weight] | None) -> None:
        """Record ``.grad`` of the tracked weights (those in ``only``, or all)."""
        collectors = self._by_target["wgrad"]
        with torch.no_grad():
            for weight in self.weights:
                if only is not None and weight not in only:
                    continue
                grad = weight.param.grad
                if grad is None:
                    if self.distributed:  # an earlier read is not this step's reduced gradient
                        for collector in collectors:
                            weight.passes.pop(collector, None)
                    continue
                for collector in collectors:
                    weight.passes[collector] = [collector.observe(weight, grad)]
        self._grads_taken = True
