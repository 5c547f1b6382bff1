"""Activations with parameters, randomness or a custom backward: PReLU, learnable SiLU,
xIELU, NoisyReLU and SUGAR.

These are the "core" modules a spec wraps; :class:`~actlab.activations.spec_activation.SpecActivation`
adds the shared options (shift, adaptive, clip, topk) around them.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from actlab.activations.elementwise import sugar_surrogate


class PReLUCore(nn.Module):
    """Leaky ReLU with one learnable negative slope (shared by all features)."""

    def __init__(self, slope: float = 0.25) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.tensor([float(slope)]))

    def forward(self, x: Tensor) -> Tensor:
        """x for x > 0, weight * x otherwise."""
        return F.prelu(x, self.weight.to(x.dtype))


class LearnableSiLUCore(nn.Module):
    """Swish x σ(βx) with a learnable scalar β (Ramachandran et al. 2017)."""

    def __init__(self, beta: float = 1.0) -> None:
        super().__init__()
        self.beta = nn.Parameter(torch.tensor(float(beta)))

    def forward(self, x: Tensor) -> Tensor:
        """x σ(βx)."""
        return x * torch.sigmoid(self.beta.to(x.dtype) * x)


def _inverse_softplus(value: float) -> Tensor:
    return torch.log(torch.expm1(torch.tensor([float(value)], dtype=torch.float64))).float()


class XIELUCore(nn.Module):
    """xIELU (Huang & Schlag 2024) parametrised as Hugging Face's ``XIELUActivation``.

    The learnable ``alpha_p`` and ``alpha_n`` are stored through softplus, so the effective
    positive coefficient is softplus(alpha_p) and the negative one beta + softplus(alpha_n),
    as in that module: the same function, the same parameter gradients. ``beta`` and ``eps``
    are constants (buffers there, never trained). The effective values are
    :attr:`coefficients`.
    """

    def __init__(self, alpha_p: float = 0.8, alpha_n: float = 0.8, beta: float = 0.5,
                 eps: float = -1e-6) -> None:
        super().__init__()
        self.alpha_p = nn.Parameter(_inverse_softplus(alpha_p))
        self.alpha_n = nn.Parameter(_inverse_softplus(alpha_n - beta))
        self.beta = float(beta)
        self.eps = float(eps)

    @property
    def coefficients(self) -> tuple[float, float]:
        """The effective ``(alpha_p, alpha_n)`` of the function now."""
        with torch.no_grad():
            return (float(F.softplus(self.alpha_p.double())),
                    self.beta + float(F.softplus(self.alpha_n.double())))

    def forward(self, x: Tensor) -> Tensor:
        """alpha_p x² + beta x for x > 0, alpha_n (expm1(min(x, eps)) − x) + beta x else."""
        alpha_p = F.softplus(self.alpha_p.to(x.dtype))
        alpha_n = self.beta + F.softplus(self.alpha_n.to(x.dtype))
        # torch.min with a tensor, as there: at x == eps its gradient splits between the two
        eps = x.new_full((), self.eps)
        return torch.where(x > 0, alpha_p * x * x + self.beta * x,
                           (torch.expm1(torch.min(x, eps)) - x) * alpha_n + self.beta * x)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, eps={self.eps}"


class NoisyReLUCore(nn.Module):
    """NoisyReLU (Gulcehre et al. 2016) in the form of "Bug or Feature²", App. D.7.

    In training mode::

        δ = max(−x, 0)                       (distance below the kink)
        σ = c (sigmoid(p δ) − 1/2)²          (noise scale, learnable through p)
        out = α relu(x) + (1 − α) x + σ |ε|  with ε ~ N(0, 1), only where x < 0

    so with α = 1 only the half-normal noise acts, and only on negative pre-activations.
    In eval mode the output is plain ``relu(x)``.

    Only ``p`` is a parameter (drawn from N(0, 1) at construction unless given, as in the
    paper's code, so seed the global generator for reproducible models). ``c`` and
    ``alpha`` are plain Python floats, as in that code: constants of the spec like every
    other spec parameter (a leaky slope, a softplus β), so no optimizer can move them and
    the forward can drop the ``(1 − α) x`` branch exactly when α = 1. Old checkpoints that
    saved them as parameters load when their values equal this module's; otherwise
    loading raises an error naming the spec that matches them.
    """

    def __init__(self, p: float | None = None, c: float = 1.0, alpha: float = 1.0) -> None:
        super().__init__()
        p_init = torch.randn(1) if p is None else torch.tensor([float(p)])
        self.p = nn.Parameter(p_init)
        self.c = float(c)
        self.alpha = float(alpha)

    def forward(self, x: Tensor) -> Tensor:
        """Noisy in training mode, ReLU in eval mode."""
        if not self.training:
            return F.relu(x)
        negative = x < 0
        delta = torch.clamp_min(-x, 0.0)
        scale = (torch.sigmoid(self.p.to(x.dtype) * delta) - 0.5).square()
        if self.c != 1.0:
            scale = scale * self.c
        eps = torch.randn_like(x).abs_()
        noise = torch.where(negative, scale * eps, torch.zeros_like(x))
        # The noise is added after the rectifier, so it survives (unlike code that applies
        # the ReLU last and thereby zeroes exactly the noisy entries).
        rectified = F.relu(x)
        if self.alpha == 1.0:  # the identity branch is absent, not 0 · x
            return rectified + noise
        return self.alpha * rectified + (1.0 - self.alpha) * x + noise

    def _load_from_state_dict(
        self,
        state_dict: dict[str, Tensor],
        prefix: str,
        local_metadata: dict,
        strict: bool,
        missing_keys: list[str],
        unexpected_keys: list[str],
        error_msgs: list[str],
    ) -> None:
        """Accept checkpoints from when ``c`` and ``alpha`` were parameters, if they agree."""
        for name in ("c", "alpha"):
            key = prefix + name
            if key not in state_dict:
                continue
            saved = float(state_dict.pop(key).reshape(()))
            if not math.isclose(saved, getattr(self, name), rel_tol=1e-6, abs_tol=1e-12):
                error_msgs.append(
                    f"{key}: the checkpoint has {name}={saved!r} (it was a learnable "
                    f"parameter); {name} is now a constant of the spec, {getattr(self, name)!r} "
                    f"here; build the activation as 'noisy_relu:{name}={saved!r}' to load it"
                )
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )

    def extra_repr(self) -> str:
        return f"c={self.c}, alpha={self.alpha}"


class _SugarFunction(torch.autograd.Function):
    """ReLU forward, B-SiLU surrogate backward (also under torch.func's vmap and grad)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x: Tensor, alpha: float) -> Tensor:  # type: ignore[override]
        return torch.clamp_min(x, 0.0)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:  # type: ignore[override]
        x, alpha = inputs
        ctx.save_for_backward(x)
        ctx.alpha = alpha

    @staticmethod
    def backward(ctx, grad_output: Tensor) -> tuple[Tensor, None]:  # type: ignore[override]
        (x,) = ctx.saved_tensors
        if torch.is_grad_enabled():  # double backward: differentiable out-of-place form
            return grad_output * sugar_surrogate(x, ctx.alpha), None
        # g (σ + (x + α) σ (1 − σ)) with two allocations instead of six
        s = torch.sigmoid(x)
        t = x + ctx.alpha
        torch.ops.aten.sigmoid_backward.grad_input(t, s, grad_input=t)  # (x + α) σ (1 − σ)
        return t.add_(s).mul_(grad_output), None


class _ReLUSavingInput(torch.autograd.Function):
    """ReLU whose backward reads the input, not the output, so the output may be modified
    in place afterwards (a shift, centring) without a copy."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:  # type: ignore[override]
        ctx.save_for_backward(x)
        return torch.relu(x)

    @staticmethod
    def backward(ctx, grad_output: Tensor) -> Tensor:  # type: ignore[override]
        (x,) = ctx.saved_tensors
        return torch.ops.aten.threshold_backward(grad_output, x, 0)


def relu_output_writable(x: Tensor) -> Tensor:
    """max(0, x), as :func:`torch.relu`, but safe to modify in place afterwards."""
    return _ReLUSavingInput.apply(x)


def sugar(x: Tensor, alpha: float = 1.67) -> Tensor:
    """SUGAR (Horuz et al. 2025): ReLU values, gradient σ(x)+(x+α)σ(x)(1−σ(x)).

    Implemented as a ``torch.autograd.Function``, so autograd really calls the surrogate
    (a ``backward`` method on an ``nn.Module`` would be ignored and train as plain ReLU).
    """
    return _SugarFunction.apply(x, alpha)
