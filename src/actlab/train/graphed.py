"""Record one training step as a CUDA graph and replay it with each new batch.

Small models in an ensemble are bound by kernel launches and Python dispatch, not by
arithmetic: the forward, backward and optimizer update of a (50, 200, 20) residual MLP are
a few thousand small kernels. A CUDA graph records them once and replays them with one
launch. What a graph needs from the step it records:

* every tensor it reads or writes between steps stays at the same address: the
  parameters and optimizer state are updated in place, the batch is copied into
  *static inputs* owned by the graph, and the step's results are *static outputs*
  overwritten by every replay (callers copy what they keep);
* nothing on the host depends on device values inside the step (no ``.item()``, no
  branching on a flag); values that change between steps, such as the learning rate, live
  in device tensors written before the replay;
* the shapes are fixed: a batch of another shape (or dtype) records another graph.

:class:`GraphedStep` wraps a ``compute(x, y) -> outputs`` function. Its first
``warmup_steps`` calls run eagerly on a side stream (lazy initialisation, optimizer state),
then each new input signature is recorded once and replayed from then on. The recorded
arithmetic is the eager one, so replayed steps equal eager steps to rounding.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.utils._pytree import tree_flatten, tree_unflatten


class GraphCaptureError(RuntimeError):
    """Recording the step failed (an op in it is not capturable); the step was not run."""


@dataclass
class _Recorded:
    graph: torch.cuda.CUDAGraph
    static_inputs: list[Tensor | None]
    outputs: Any


class GraphedStep:
    """Run ``compute(x, y)`` through CUDA graphs, one per input signature.

    Args:
        compute: one training step; it must update its state in place and return tensors
            (any nesting of lists, tuples and dicts).
        device: the CUDA device the step runs on; inputs are copied there.
        before_replay: called on the host before every replay (write the device tensors
            that change between steps, such as the learning rate; count the step).
        warmup_steps: eager calls (on a side stream) before the first recording.
        max_graphs: recorded signatures kept; one more raises (a changing batch shape
            would otherwise record a graph every step).

    Calling it returns the step's outputs. Recording runs nothing: the call that records
    a graph then replays it once as its step. The outputs of a replay are the graph's own
    tensors, overwritten by the next replay.
    """

    def __init__(self, compute: Callable[[Any, Any], Any], device: torch.device | str,
                 before_replay: Callable[[], None] = lambda: None, warmup_steps: int = 3,
                 max_graphs: int = 4) -> None:
        self.device = torch.device(device)
        if self.device.type != "cuda":
            raise ValueError(f"device: CUDA graphs need a CUDA device, got {self.device}")
        if warmup_steps < 1:
            raise ValueError(f"warmup_steps: must be >= 1, got {warmup_steps}")
        self.compute = compute
        self.before_replay = before_replay
        self.warmup_steps = warmup_steps
        self.max_graphs = max_graphs
        self.eager_calls = 0
        self.graphs: dict[Any, _Recorded] = {}
        self._pool = torch.cuda.graph_pool_handle()
        self._side = torch.cuda.Stream(self.device)

    def __call__(self, x: Any, y: Any) -> Any:
        """One step on ``(x, y)``; see the class docstring for what is returned."""
        leaves, spec = tree_flatten((x, y))
        if not all(t is None or isinstance(t, Tensor) for t in leaves):
            raise TypeError("GraphedStep: inputs must be tensors or None (or nested containers "
                            "of them)")
        if self.eager_calls < self.warmup_steps:
            self.eager_calls += 1
            return self._on_side_stream(lambda: self.compute(x, y))
        signature = (spec, tuple(None if t is None else (t.shape, t.dtype) for t in leaves))
        recorded = self.graphs.get(signature)
        if recorded is None:
            recorded = self._record(signature, leaves, spec)
        else:
            for static, value in zip(recorded.static_inputs, leaves):
                if static is not None:
                    static.copy_(value, non_blocking=True)
        self.before_replay()
        recorded.graph.replay()
        return recorded.outputs

    def _on_side_stream(self, run: Callable[[], Any]) -> Any:
        """Run eagerly on the side stream, ordered after and before the current stream's work."""
        current = torch.cuda.current_stream(self.device)
        self._side.wait_stream(current)
        with torch.cuda.stream(self._side):
            out = run()
        current.wait_stream(self._side)
        return out

    def _record(self, signature: Any, leaves: list[Tensor], spec: Any) -> _Recorded:
        """Record the step on static copies of this call's inputs (nothing runs yet)."""
        if len(self.graphs) >= self.max_graphs:
            raise GraphCaptureError(
                f"more than {self.max_graphs} input shapes: record a graph per shape only "
                "for a few fixed shapes (use the eager step for changing ones)")
        static = [None if t is None else t.to(self.device, copy=True) for t in leaves]
        x, y = tree_unflatten(static, spec)
        graph = torch.cuda.CUDAGraph()
        torch.cuda.synchronize(self.device)
        try:
            with torch.cuda.graph(graph, pool=self._pool):
                outputs = self.compute(x, y)
        except Exception as error:  # the op that cannot be captured names itself
            raise GraphCaptureError(f"recording the step failed: {error}") from error
        recorded = _Recorded(graph, static, outputs)
        self.graphs[signature] = recorded
        return recorded
