"""Plain deep fully connected stacks for signal-propagation and initialization studies.

:class:`DeepMLP` is ``depth`` hidden layers of ``width`` units with one activation spec,
optionally with batch or layer normalization of every net input and/or residual
connections, and a linear output layer (losses such as cross-entropy take its net input, so
a sigmoid output stays finite when it saturates). :meth:`DeepMLP.trace` returns the net
inputs and activations of every hidden layer, which is what the measurements in
:mod:`actlab.measure.signal` read.

:func:`initialize_deep_mlp_` sets the weights of every linear layer by a named scheme and
the biases to zero (the setting of the handbook's derivations):

* ``xavier``: variance ``gain^2 * 2 / (fan_in + fan_out)`` (gain 1 unless given);
* ``he``: variance ``gain^2 / fan_in`` with He's gain sqrt(2) unless given (so ``gain=2``
  is "sqrt(2) times He");
* ``torch-default``: the variance of ``torch.nn.Linear``'s default, ``1 / (3 fan_in)``;
* ``fixed-point``: variance ``gain^2 / fan_in`` with the activation's fixed-point gain
  ``1 / sqrt(E f(z)^2)``, z ~ N(0, 1), from :func:`actlab.theory.moments`;
* ``orthogonal``: orthonormal rows (or columns) scaled by the gain (default 1);
* ``std``: every weight with the fixed standard deviation ``std`` (e.g. 0.01).

Weights are normal unless ``distribution="uniform"`` (same variance). All draws come from
the ``generator`` passed in, so a seed fixes the network.
The standard deviations are ``actlab.init.weight_std(..., convention="handbook")``, whose
conventions differ from :mod:`actlab.init`'s where noted there (``orthogonal``'s gain 1 over
sqrt(fan_in); ``torch-default`` keeps ``nn.Linear``'s own ``1 / sqrt(3 fan_in)`` bit for bit).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from actlab import init
from actlab.activations.spec_activation import make_activation
from actlab.device import place
from actlab.errors import ConfigError

Norm = Literal["batch", "layer"] | None
SCHEMES = init.HANDBOOK_SCHEMES


@torch.no_grad()
def init_linear_(
    layer: nn.Linear,
    scheme: str,
    *,
    activation: str = "relu",
    gain: float | None = None,
    std: float | None = None,
    distribution: Literal["normal", "uniform"] = "normal",
    generator: torch.Generator | None = None,
) -> nn.Linear:
    """Initialise one linear layer in place by ``scheme``; biases become zero."""
    fan_out, fan_in = layer.weight.shape
    weight = layer.weight
    if scheme == "orthogonal":
        scale = 1.0 if gain is None else gain
        flat = torch.randn(max(fan_out, fan_in), min(fan_out, fan_in), generator=generator,
                           dtype=torch.float64)
        q, r = torch.linalg.qr(flat)
        q = q * torch.sign(torch.diagonal(r))  # make the draw Haar-distributed
        q = q if fan_out >= fan_in else q.T
        weight.copy_(scale * q.to(weight.dtype))
    else:
        sd = init.weight_std(scheme, fan_in, fan_out, activation=activation, gain=gain, std=std,
                             convention="handbook")
        if distribution == "normal":
            draw = torch.randn(weight.shape, generator=generator, dtype=torch.float64)
            weight.copy_((sd * draw).to(weight.dtype))
        elif distribution == "uniform":
            bound = sd * init.UNIFORM_BOUND_PER_STD
            draw = torch.rand(weight.shape, generator=generator, dtype=torch.float64)
            weight.copy_((bound * (2 * draw - 1)).to(weight.dtype))
        else:
            raise ValueError(f"distribution must be 'normal' or 'uniform', got {distribution!r}")
    if layer.bias is not None:
        layer.bias.zero_()
    return layer


@dataclass
class Trace:
    """What one forward pass of a :class:`DeepMLP` saw.

    ``net_inputs[l]`` is ``W a + b`` of hidden layer ``l + 1`` (before any normalization),
    ``activations[l]`` its output after the activation (and the residual sum), ``inputs`` the
    input batch and ``output`` the output layer's net input. When traced with
    ``retain_grad=True`` every net input keeps its gradient after ``backward``.
    """

    inputs: torch.Tensor
    net_inputs: list[torch.Tensor]
    activations: list[torch.Tensor]
    output: torch.Tensor


class DeepMLP(nn.Module):
    """``depth`` hidden layers of ``width`` units with activation ``activation`` and a linear output.

    ``norm`` (``"batch"``, ``"layer"`` or ``None``) normalizes each hidden net input before the
    activation (batch norm uses batch statistics in training mode, as usual); ``residual``
    adds each hidden layer's input to its output wherever the shapes agree, i.e.
    ``a_l = a_{l-1} + f(norm(W_l a_{l-1} + b_l))``. The hidden activations are separate
    modules (one per layer) so probes can hook each layer.
    """

    def __init__(
        self,
        in_features: int,
        width: int,
        depth: int,
        out_features: int = 1,
        *,
        activation: str = "relu",
        norm: Norm = None,
        residual: bool = False,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        for name, value in (("in_features", in_features), ("width", width), ("depth", depth),
                            ("out_features", out_features)):
            if int(value) < 1:
                raise ConfigError(name, f"must be >= 1, got {value}")
        if norm not in (None, "batch", "layer"):
            raise ConfigError("norm", f"must be 'batch', 'layer' or None, got {norm!r}")
        self.activation_spec = activation
        self.norm_kind = norm
        self.residual = residual
        sizes = [in_features] + [width] * depth
        self.hidden = nn.ModuleList(
            nn.Linear(a, b, dtype=dtype) for a, b in zip(sizes[:-1], sizes[1:])
        )
        self.acts = nn.ModuleList(make_activation(activation) for _ in range(depth))
        if norm == "batch":
            self.norms = nn.ModuleList(nn.BatchNorm1d(width, dtype=dtype) for _ in range(depth))
        elif norm == "layer":
            self.norms = nn.ModuleList(nn.LayerNorm(width, dtype=dtype) for _ in range(depth))
        else:
            self.norms = nn.ModuleList(nn.Identity() for _ in range(depth))
        self.output = nn.Linear(width, out_features, dtype=dtype)

    @property
    def linears(self) -> list[nn.Linear]:
        """Every linear layer from the input to the output (hidden layers first)."""
        return [*self.hidden, self.output]

    def trace(self, x: torch.Tensor, *, retain_grad: bool = False) -> Trace:
        """Forward pass that also returns every hidden net input and activation."""
        net_inputs, activations = [], []
        a = x
        for linear, norm, act in zip(self.hidden, self.norms, self.acts):
            z = linear(a)
            if retain_grad and z.requires_grad:
                z.retain_grad()
            out = act(norm(z))
            a = a + out if self.residual and a.shape == out.shape else out
            net_inputs.append(z)
            activations.append(a)
        return Trace(x, net_inputs, activations, self.output(a))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The output layer's net input (logits for a sigmoid / cross-entropy output)."""
        a = x
        for linear, norm, act in zip(self.hidden, self.norms, self.acts):
            out = act(norm(linear(a)))
            a = a + out if self.residual and a.shape == out.shape else out
        return self.output(a)


def initialize_deep_mlp_(
    model: DeepMLP,
    scheme: str,
    *,
    gain: float | None = None,
    std: float | None = None,
    distribution: Literal["normal", "uniform"] = "normal",
    generator: torch.Generator | None = None,
) -> DeepMLP:
    """Initialise every linear layer of ``model`` (output included) in place; biases zero.

    The activation for ``fixed-point`` is the model's own. Layers are drawn in order from
    the input to the output from ``generator``. Normalization layers keep their defaults
    (scale 1, shift 0).
    """
    for layer in model.linears:
        init_linear_(layer, scheme, activation=model.activation_spec, gain=gain, std=std,
                     distribution=distribution, generator=generator)
    return model


def deep_mlp(
    in_features: int,
    width: int,
    depth: int,
    out_features: int = 1,
    *,
    activation: str = "relu",
    scheme: str = "he",
    gain: float | None = None,
    std: float | None = None,
    norm: Norm = None,
    residual: bool = False,
    seed: int = 0,
    dtype: torch.dtype = torch.float64,
    device: str | torch.device | None = None,
) -> DeepMLP:
    """Build and initialise a :class:`DeepMLP` from a seed (float64 by default).

    The weights are drawn on the CPU (the same numbers on every device) and the model is
    then moved to ``device`` (default: the unit's device, :mod:`actlab.train.placement`).

    >>> model = deep_mlp(2, 32, 20, activation="relu", scheme="he", seed=0)
    >>> len(model.hidden), model.output.out_features
    (20, 1)
    """
    model = DeepMLP(in_features, width, depth, out_features, activation=activation, norm=norm,
                    residual=residual, dtype=dtype)
    generator = torch.Generator().manual_seed(int(seed))
    initialize_deep_mlp_(model, scheme, gain=gain, std=std, generator=generator)
    return place(model, device)
