"""Per-layer signal sizes of a deep stack: the measured twins of the variance recursion.

For a :class:`~actlab.nn.deep_mlp.DeepMLP` and one batch, :func:`signal_profile` measures
for every hidden layer ``l``

* ``activation_std``: standard deviation of the activations ``a_l`` over units and examples;
* ``net_input_std``: standard deviation of the net inputs ``z_l = W_l a_{l-1} + b_l``;
* ``error_rms``: root mean square of the per-example errors ``delta_l = dC_i/dz_l`` (the
  backpropagated error of one example's cost, as in the backpropagation equations);
* ``per_example_grad_rms``: root mean square over examples of the Frobenius norm of one
  example's weight gradient ``delta_l a_{l-1}^T``, which is ``|delta_l| |a_{l-1}|`` exactly;
* ``batch_grad_norm``: Frobenius norm of the weight gradient of the batch-mean cost;
* ``saturated_share``: share of activations with ``|a| > threshold`` (0.99 by default; for
  tanh that is ``|z| > 2.65``).

Gradients are taken with :func:`torch.autograd.grad`, so the caller's ``.grad`` fields are
left alone. :func:`dead_unit_share` counts units whose net input is ``<= 0`` on every example.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

from actlab.device import to_model_device
from actlab.nn.deep_mlp import DeepMLP

# Per-example cost from (output net input, targets) -> one value per example.
PerExampleCost = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def half_squared_error(output: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per-example cost ``|y_hat - y|^2 / 2`` (the identity output's error is ``y_hat - y``)."""
    return 0.5 * (output - targets.reshape(output.shape)).pow(2).sum(dim=-1)


def logistic_cross_entropy(output: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per-example cross-entropy of a sigmoid output, computed from its net input (stays finite)."""
    logits = output.reshape(-1)
    return torch.nn.functional.binary_cross_entropy_with_logits(
        logits, targets.reshape(-1).to(logits.dtype), reduction="none"
    )


@dataclass
class SignalProfile:
    """Per-layer measurements of one batch; every list has one entry per hidden layer."""

    activation_std: list[float]
    net_input_std: list[float]
    error_rms: list[float]
    per_example_grad_rms: list[float]
    batch_grad_norm: list[float]
    saturated_share: list[float]
    cost: float
    output_error_second_moment: float = math.nan

    def as_dict(self) -> dict[str, list[float] | float]:
        """The measurements as a plain dict."""
        return asdict(self)


def signal_profile(
    model: DeepMLP,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    *,
    cost: PerExampleCost = half_squared_error,
    saturation_threshold: float = 0.99,
    gradients: bool = True,
) -> SignalProfile:
    """Measure activation, net-input, error and weight-gradient sizes of every hidden layer.

    ``gradients=False`` skips the backward pass (error and gradient fields are then ``nan``).
    The data is moved to the model's device.
    """
    nan = math.nan
    inputs, targets = to_model_device(model, inputs, targets)
    with torch.set_grad_enabled(gradients):
        trace = model.trace(inputs)
        per_example = cost(trace.output, targets)
    depth = len(trace.net_inputs)
    deltas, weight_grads = [None] * depth, [None] * depth
    output_error_ms = nan
    if gradients:
        weights = [layer.weight for layer in model.hidden]
        grads = torch.autograd.grad(per_example.sum(), [*trace.net_inputs, *weights, trace.output])
        deltas, weight_grads = grads[:depth], grads[depth:2 * depth]
        output_error_ms = float(grads[-1].pow(2).mean())
    batch = inputs.shape[0]
    below = [trace.inputs, *trace.activations[:-1]]
    profile = SignalProfile([], [], [], [], [], [], float(per_example.detach().mean()),
                            output_error_ms)
    with torch.no_grad():
        for z, a, a_below, delta, grad in zip(trace.net_inputs, trace.activations, below,
                                              deltas, weight_grads):
            profile.activation_std.append(float(a.std(unbiased=False)))
            profile.net_input_std.append(float(z.std(unbiased=False)))
            profile.saturated_share.append(float((a.abs() > saturation_threshold).double().mean()))
            if delta is None:
                for field_ in ("error_rms", "per_example_grad_rms", "batch_grad_norm"):
                    getattr(profile, field_).append(nan)
                continue
            profile.error_rms.append(float(delta.pow(2).mean().sqrt()))
            norms = delta.norm(dim=1) * a_below.norm(dim=1)
            profile.per_example_grad_rms.append(float(norms.pow(2).mean().sqrt()))
            profile.batch_grad_norm.append(float(grad.norm() / batch))
    return profile


def weight_grad_norms(
    model: torch.nn.Module,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    *,
    cost: PerExampleCost = logistic_cross_entropy,
    layers: list[torch.nn.Linear] | None = None,
) -> list[float]:
    """Frobenius norms of the weight gradients of the mean cost on ``(inputs, targets)``.

    ``layers`` defaults to ``model.linears`` (every linear layer, output last). The caller's
    ``.grad`` fields are not touched. The data is moved to the model's device.
    """
    layers = list(model.linears) if layers is None else layers
    inputs, targets = to_model_device(model, inputs, targets)
    loss = cost(model(inputs), targets).mean()
    grads = torch.autograd.grad(loss, [layer.weight for layer in layers])
    return [float(g.norm()) for g in grads]


@torch.no_grad()
def dead_unit_masks(net_inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """Per layer, a boolean mask of the units whose net input is ``<= 0`` for every example."""
    return [(z <= 0).all(dim=0) for z in net_inputs]


@torch.no_grad()
def dead_unit_share(net_inputs: list[torch.Tensor]) -> tuple[float, list[float]]:
    """Share of dead units over all hidden layers together, and per layer."""
    masks = dead_unit_masks(net_inputs)
    per_layer = [float(m.double().mean()) for m in masks]
    total = sum(int(m.sum()) for m in masks) / max(sum(m.numel() for m in masks), 1)
    return float(total), per_layer


def predicted_profile(
    widths: list[int],
    weight_stds: list[float],
    activation: str,
    *,
    output_activation: str = "identity",
    input_second_moment: float = 1.0,
    output_error_second_moment: float | None = None,
    target_second_moment: float = 1.0,
) -> SignalProfile:
    """The variance recursion's prediction of :func:`signal_profile` for a plain stack.

    ``widths`` run from the input to the output, ``weight_stds`` hold one standard deviation
    per weight matrix. The backward recursion starts from ``output_error_second_moment``,
    ``E (dC/d y_hat)^2`` per output unit; pass the measured one to predict how a given output
    error travels down (one network's output error is essentially one random draw, because
    deep stacks map all inputs to nearly the same direction). ``None`` uses the half squared
    error's average over networks against independent targets of second moment
    ``target_second_moment``, ``q_out + E y^2``. Batch gradient norms and saturated shares
    have no prediction here and are ``nan``.
    """
    from actlab.theory import moments, predict_variances

    variances = [s**2 for s in weight_stds]
    specs = [activation] * (len(widths) - 2) + [output_activation]
    first = predict_variances(widths, variances, specs, input_second_moment=input_second_moment)
    gradient = output_error_second_moment
    if gradient is None:
        gradient = first.activation_second_moment[-1] + target_second_moment
    pred = predict_variances(widths, variances, specs, input_second_moment=input_second_moment,
                             output_gradient_second_moment=gradient)
    hidden = len(widths) - 2
    act_std = []
    for q, m in zip(pred.net_input_variance[:hidden], pred.activation_second_moment[:hidden]):
        mean = moments(activation, q).mean
        act_std.append(math.sqrt(max(m - mean**2, 0.0)))
    nan = [math.nan] * hidden
    return SignalProfile(
        activation_std=act_std,
        net_input_std=[math.sqrt(q) for q in pred.net_input_variance[:hidden]],
        error_rms=[math.sqrt(e) for e in pred.error_variance[:hidden]],
        per_example_grad_rms=list(pred.weight_gradient_norm[:hidden]),
        batch_grad_norm=nan,
        saturated_share=list(nan),
        cost=math.nan,
    )
