"""The forward and backward variance recursion of a plain deep network at initialization.

For layer ``l`` with fan-in ``n[l-1]``, independent zero-mean weights of variance ``v[l]``,
zero biases and inputs of second moment ``m[l-1]`` ("Variance through one layer"):

    q[l] = n[l-1] · v[l] · m[l-1]           net-input variance
    m[l] = E f_l(z)²,       z ~ N(0, q[l])   activation second moment (not its variance)
    s[l] = E f_l'(z)²,      z ~ N(0, q[l])   mean squared slope

Backwards, with the errors Δ[l] = ∂C/∂z[l] independent of the weights above them:

    e[L] = g · s[L]                          g = E (∂C/∂a[L])², the output gradient
    e[l] = n[l+1] · v[l+1] · e[l+1] · s[l]   the backward factor of one layer

and the per-example weight gradient ``Δ[l] a[l-1]ᵀ`` has squared Frobenius norm
``|Δ[l]|² |a[l-1]|²``, predicted as ``n[l] e[l] · n[l-1] m[l-1]``.

:func:`measure_variances` builds the matching random network and measures the same
quantities with autograd, for the "theory next to measurement" figures and tests.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import torch

from actlab.theory.gaussian import gaussian_expectations, resolve


@dataclass(frozen=True)
class VariancePrediction:
    """Per-layer sizes of a plain network, layer 1 (first weight matrix) to L (output).

    Every field is a list of length L: ``net_input_variance`` q, ``activation_second_moment``
    m, ``slope_second_moment`` E f'(z)², ``error_variance`` E Δ² per unit, and
    ``weight_gradient_norm``, the root mean square of the per-example Frobenius norm of the
    weight gradient.
    """

    net_input_variance: list[float]
    activation_second_moment: list[float]
    slope_second_moment: list[float]
    error_variance: list[float]
    weight_gradient_norm: list[float]

    def as_dict(self) -> dict[str, list[float]]:
        """The fields as a dict of lists."""
        return asdict(self)

    def rows(self) -> list[dict[str, float]]:
        """One dict per layer (``layer`` counts from 1), convenient for tables."""
        data = self.as_dict()
        return [
            {"layer": i + 1, **{k: v[i] for k, v in data.items()}}
            for i in range(len(self.net_input_variance))
        ]


def _per_layer(name: str, value, count: int) -> list:
    if isinstance(value, (str, int, float)):
        return [value] * count
    values = list(value)
    if len(values) != count:
        raise ValueError(f"{name}: expected {count} entries (one per layer), got {len(values)}")
    return values


def _check_widths(widths: Sequence[int]) -> list[int]:
    widths = [int(w) for w in widths]
    if len(widths) < 2 or min(widths) < 1:
        raise ValueError(f"widths: need at least two positive widths (input and output), got {widths}")
    return widths


def predict_variances(
    widths: Sequence[int],
    weight_variances: float | Sequence[float],
    activations: str | Sequence[str],
    input_second_moment: float = 1.0,
    output_gradient_second_moment: float = 1.0,
) -> VariancePrediction:
    """Predict per-layer signal and error sizes of a plain network at initialization.

    ``widths`` are ``[n0, n1, ..., nL]`` (input first), ``weight_variances`` one variance per
    weight matrix (or one for all), ``activations`` one spec per layer including the output
    layer (or one for all; use ``"identity"`` for a linear output).
    ``input_second_moment`` is E x² of the inputs and ``output_gradient_second_moment`` is
    E (∂C/∂a_L)² per output unit (1 for C = Σ r·a_L with standard normal r).

    >>> p = predict_variances([300, 100, 100], 2 / 300, "relu")
    >>> round(p.net_input_variance[0], 6)
    2.0
    """
    widths = _check_widths(widths)
    depth = len(widths) - 1
    variances = [float(v) for v in _per_layer("weight_variances", weight_variances, depth)]
    if any(not math.isfinite(v) or v < 0 for v in variances):
        raise ValueError(f"weight_variances: must be finite and >= 0, got {variances}")
    specs = _per_layer("activations", activations, depth)

    q, m, s = [], [], []
    second_moment = float(input_second_moment)
    for fan_in, variance, spec in zip(widths[:-1], variances, specs):
        function, derivative = resolve(spec)
        variance_in = fan_in * variance * second_moment
        second_moment, slope = gaussian_expectations(
            [lambda z, f=function: f(z) ** 2, lambda z, d=derivative: d(z) ** 2], variance_in
        )
        q.append(variance_in)
        m.append(second_moment)
        s.append(slope)

    errors = [0.0] * depth
    errors[-1] = float(output_gradient_second_moment) * s[-1]
    for layer in range(depth - 2, -1, -1):
        errors[layer] = widths[layer + 2] * variances[layer + 1] * errors[layer + 1] * s[layer]

    inputs_m = [float(input_second_moment)] + m[:-1]
    grads = [
        math.sqrt(widths[i + 1] * errors[i] * widths[i] * inputs_m[i]) for i in range(depth)
    ]
    return VariancePrediction(q, m, s, errors, grads)


def measure_variances(
    widths: Sequence[int],
    weight_variances: float | Sequence[float],
    activations: str | Sequence[str],
    n_examples: int = 500,
    input_second_moment: float = 1.0,
    output_gradient_second_moment: float = 1.0,
    generator: torch.Generator | None = None,
) -> VariancePrediction:
    """Measure what :func:`predict_variances` predicts, on one random network in float64.

    Weights are drawn N(0, v) with zero biases, inputs N(0, input_second_moment), and the
    cost is C = Σ r·a_L with r ~ N(0, output_gradient_second_moment) per example, so that
    each example's error is its own. Averages run over units and examples; the weight
    gradient is the root mean square over examples of the per-example norm |Δ| |a|.
    """
    widths = _check_widths(widths)
    depth = len(widths) - 1
    variances = [float(v) for v in _per_layer("weight_variances", weight_variances, depth)]
    specs = _per_layer("activations", activations, depth)
    options = {"dtype": torch.float64, "generator": generator}

    x = torch.randn(n_examples, widths[0], **options) * math.sqrt(input_second_moment)
    weights = [
        torch.randn(n_out, n_in, **options) * math.sqrt(v)
        for n_in, n_out, v in zip(widths[:-1], widths[1:], variances)
    ]
    probe = torch.randn(n_examples, widths[-1], **options) * math.sqrt(output_gradient_second_moment)

    functions = [resolve(spec) for spec in specs]
    inputs, net_inputs, outputs = [], [], []
    a = x
    for weight, (function, _) in zip(weights, functions):
        inputs.append(a.detach())
        # Each net input is its own leaf so that autograd hands back Δ = ∂C/∂z per layer.
        z = (a.detach() @ weight.T).requires_grad_(True)
        net_inputs.append(z)
        a = function(z)
        outputs.append(a)
    # Chain the layers by hand: Δ[l] = (W[l+1]ᵀ Δ[l+1]) ⊙ f'(z[l]), with f' from autograd.
    grads: list[torch.Tensor] = [torch.empty(0)] * depth
    upstream = probe
    for layer in range(depth - 1, -1, -1):
        (grads[layer],) = torch.autograd.grad(outputs[layer], net_inputs[layer], upstream)
        upstream = grads[layer] @ weights[layer]

    with torch.no_grad():
        q = [float(z.pow(2).mean()) for z in net_inputs]
        m = [float(o.detach().pow(2).mean()) for o in outputs]
        e = [float(g.pow(2).mean()) for g in grads]
        w = [
            float((g.pow(2).sum(1) * inp.pow(2).sum(1)).mean().sqrt())
            for g, inp in zip(grads, inputs)
        ]
        s = [
            float(derivative(z.detach()).pow(2).mean())
            for z, (_, derivative) in zip(net_inputs, functions)
        ]
    return VariancePrediction(q, m, s, e, w)
