"""Exponential moving average of a model's weights, as a callback of the single-model engine.

:class:`EMA` keeps a shadow copy of the model (a deep copy with ``requires_grad_(False)``, in
eval mode) and after every update sets each shadow parameter to
``decay * shadow + (1 - decay) * parameter``, the ``update_ema`` of the reference training
script of "Scalable Diffusion Models with Transformers" (Peebles & Xie, 2023), whose default
decay 0.9999 it keeps. Before training (update count 0) it copies the model, as the
reference's ``update_ema(ema, model, decay=0)``; with ``start=k`` it keeps copying through
update ``k`` and averages from then on. Buffers are copied, not averaged (they are not
trained by the optimizer; integer ones such as BatchNorm's counters cannot be averaged).

The shadow weights travel with the trainer's checkpoint through
:meth:`~actlab.train.callbacks.Callback.state_tensors` (the safetensors file, not the JSON
metadata), so a resumed run ends with the same shadow weights as an uninterrupted one.

Example::

    ema = EMA(model, decay=0.9999)
    Trainer(model, settings, batches, loss_fn=loss, callbacks=[ema]).fit()
    samples = ddpm_sample(ema.module, diffusion, shape, y, generator=g)
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import Tensor, nn

from actlab.train.callbacks import Callback
from actlab.train.distributed import unwrap_model


class EMA(Callback):
    """Shadow weights averaged after every update (see the module docstring).

    Args:
        model: the model to follow (a DDP wrapper is unwrapped); it is deep-copied now.
        decay: weight of the old shadow value, in ``[0, 1]`` (1 freezes the first copy).
        start: through update count ``start`` the shadow copies the model (decay 0).

    :attr:`module` is the shadow model to evaluate or sample from; it follows the trained
    model's device and floating dtype (the engine may move or convert the model after this
    callback was made).
    """

    def __init__(self, model: nn.Module, decay: float = 0.9999, *, start: int = 0) -> None:
        super().__init__(every=1)
        if not 0.0 <= decay <= 1.0:
            raise ValueError(f"decay: must be in [0, 1], got {decay}")
        if start < 0:
            raise ValueError(f"start: must be >= 0, got {start}")
        self.decay = float(decay)
        self.start = int(start)
        self.updates = 0
        self.module = copy.deepcopy(unwrap_model(model)).requires_grad_(False).eval()

    def fires(self, step: int) -> bool:
        """Every update count, 0 (the copy before training) included."""
        return True

    def on_step(self, trainer: Any, step: int, loss: Tensor | None) -> None:
        """Copy (through update ``start``) or average the trainer's model into the shadow."""
        self.update(unwrap_model(trainer.model), 0.0 if step <= self.start else self.decay)

    @torch.no_grad()
    def update(self, model: nn.Module, decay: float | None = None) -> None:
        """One step of the average towards ``model`` (``decay`` defaults to :attr:`decay`)."""
        decay = self.decay if decay is None else decay
        self._follow(model)
        params = dict(model.named_parameters())
        for name, shadow in self.module.named_parameters():
            if decay == 0.0:  # an exact copy (0 * shadow would keep a non-finite value)
                shadow.copy_(params[name])
            else:
                shadow.mul_(decay).add_(params[name].detach(), alpha=1.0 - decay)
        buffers = dict(model.named_buffers())
        for name, shadow in list(self.module.named_buffers()):
            source = buffers[name]
            if shadow.shape != source.shape:
                # a buffer sized on the first batch (PercentileLayerNorm's running statistics)
                owner, _, leaf = name.rpartition(".")
                setattr(self.module.get_submodule(owner), leaf, source.detach().clone())
            else:
                shadow.copy_(source)
        self.updates += 1

    def _follow(self, model: nn.Module) -> None:
        """Move the shadow to the model's device and floating dtype if they differ."""
        ref = next((p for p in model.parameters() if p.is_floating_point()), None)
        own = next((p for p in self.module.parameters() if p.is_floating_point()), None)
        if ref is not None and own is not None and (own.device, own.dtype) != (ref.device,
                                                                                ref.dtype):
            self.module.to(device=ref.device, dtype=ref.dtype)

    def state_dict(self) -> dict[str, Any]:
        """Settings and the number of updates so far (the weights go in :meth:`state_tensors`)."""
        return {"decay": self.decay, "start": self.start, "updates": self.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the update count (the settings are the constructor's)."""
        self.updates = int(state.get("updates", 0))

    def state_tensors(self) -> dict[str, Tensor]:
        """The shadow model's state dict (parameters and buffers), on the CPU."""
        return {k: v.detach().cpu().clone() for k, v in self.module.state_dict().items()}

    def load_state_tensors(self, tensors: dict[str, Tensor]) -> None:
        """Load :meth:`state_tensors` output into the shadow (copied to its device and dtype)."""
        self.module.load_state_dict(tensors)
