"""The plain MLP of the weight-drift study ("Bug or Feature²" App. D.2), with optional skips
and norms.

Layout: an input projection ``Linear(in, d) -> [Norm] -> Act`` (layer 1), ``depth`` blocks
``Linear(d, d) -> [Norm] -> Act`` (layers 2 .. depth+1), and an output ``Linear(d, out)``.
All linear layers omit biases by default and no normalization is used, as in "Bug or Feature²".
With ``skip=True`` each block adds its input back: ``x + Act(Norm(Linear(x)))``.

We read the paper's "input projection" as followed by the activation, so that every block's
weight matrix sees a post-activation input: this is the condition under which the paper's
argument predicts drift (its App. C.2), and it matches drift in layers 2..6 and none in
layer 1. The norm, when there is one, sits between the linear layer and the activation, so
Percentile Centering directly sets the fraction of negative activation inputs.
"""

from __future__ import annotations

from torch import Tensor, nn

from actlab.activations.spec_activation import make_activation
from actlab.nn.norms import make_norm


class MLPBlock(nn.Module):
    """``Linear -> Norm -> Act``, plus the input when ``skip`` is set (square blocks only)."""

    def __init__(self, in_dim: int, out_dim: int, activation: str | nn.Module, norm: str = "none",
                 bias: bool = False, skip: bool = False, norm_bias: bool = True) -> None:
        super().__init__()
        if skip and in_dim != out_dim:
            raise ValueError(f"a skip block needs in_dim == out_dim, got {in_dim} and {out_dim}")
        self.linear = nn.Linear(in_dim, out_dim, bias=bias)
        self.norm = make_norm(norm, out_dim, bias=norm_bias)
        self.act = make_activation(activation)
        self.skip = skip

    def forward(self, x: Tensor) -> Tensor:
        """Apply the block."""
        h = self.act(self.norm(self.linear(x)))
        return x + h if self.skip else h


class MLP(nn.Module):
    """The MLP of "Bug or Feature²": input projection, ``depth`` blocks, linear output (see the
    module docstring).

    Inputs of any shape ``(N, ...)`` are flattened. ``activation`` is a spec string
    (e.g. ``"relu"``, ``"gelu:topk=0.1"``) or a module (deep-copied into every block), ``norm`` a :func:`~actlab.nn.norms.make_norm`
    name. ``norm_bias=False`` drops the percentile norms' learned shift.
    """

    def __init__(self, in_dim: int, out_dim: int, hidden: int = 128, depth: int = 5,
                 activation: str | nn.Module = "relu", norm: str = "none", skip: bool = False,
                 bias: bool = False, norm_bias: bool = True) -> None:
        super().__init__()
        if depth < 0 or hidden < 1:
            raise ValueError(f"need depth >= 0 and hidden >= 1, got depth={depth}, hidden={hidden}")
        self.input = MLPBlock(in_dim, hidden, activation, norm, bias, skip=False, norm_bias=norm_bias)
        self.blocks = nn.ModuleList(
            MLPBlock(hidden, hidden, activation, norm, bias, skip=skip, norm_bias=norm_bias)
            for _ in range(depth))
        self.head = nn.Linear(hidden, out_dim, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        """Logits (or regression outputs) for a batch."""
        x = self.input(x.flatten(1))
        for block in self.blocks:
            x = block(x)
        return self.head(x)

    def linear_layers(self) -> dict[str, nn.Linear]:
        """The weight layers in depth order, named ``layer1`` .. ``layer{depth+2}``."""
        layers = [self.input.linear, *(b.linear for b in self.blocks), self.head]
        return {f"layer{i}": layer for i, layer in enumerate(layers, start=1)}

    def layer_names(self) -> dict[str, str]:
        """Module name -> depth label (``layer1`` ..) for weight layers and activation sites.

        The activation of block ``k`` shares its label with the linear layer that feeds it.
        """
        names = {"input.linear": "layer1", "input.act": "layer1",
                 "head": f"layer{len(self.blocks) + 2}"}
        for i in range(len(self.blocks)):
            names[f"blocks.{i}.linear"] = names[f"blocks.{i}.act"] = f"layer{i + 2}"
        return names
