"""Values and derivatives of every activation, float64, against PyTorch, finite differences
and gradcheck; the handbook's worked example."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import actlab
from actlab.activations.spec import resolve_elementwise

GRID = torch.linspace(-25.0, 25.0, 1001, dtype=torch.float64)
TOL = 1e-12


def _close(actual: torch.Tensor, expected: torch.Tensor, tol: float = TOL) -> float:
    """Largest error relative to max(1, |expected|)."""
    return float(((actual - expected).abs() / expected.abs().clamp_min(1.0)).max())


def _value_and_grad(fn, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x = x.clone().requires_grad_(True)
    y = fn(x)
    (grad,) = torch.autograd.grad(y.sum(), x)
    return y.detach(), grad


# spec -> PyTorch's own module (in float64).
TORCH_REFERENCE = {
    "relu": lambda: nn.ReLU(),
    "leaky_relu": lambda: nn.LeakyReLU(0.01),
    "leaky_relu:slope=0.2": lambda: nn.LeakyReLU(0.2),
    "prelu": lambda: nn.PReLU(),
    "elu": lambda: nn.ELU(),
    "elu:alpha=0.5": lambda: nn.ELU(0.5),
    "selu": lambda: nn.SELU(),
    "gelu": lambda: nn.GELU(),
    "gelu:tanh": lambda: nn.GELU(approximate="tanh"),
    "silu": lambda: nn.SiLU(),
    "sigmoid": lambda: nn.Sigmoid(),
    "tanh": lambda: nn.Tanh(),
    "softplus": lambda: nn.Softplus(),
    "softplus:beta=2": lambda: nn.Softplus(beta=2.0),
    "mish": lambda: nn.Mish(),
    "identity": lambda: nn.Identity(),
    "noisy_relu": lambda: nn.ReLU(),  # compared in eval mode
}

# Reference-math exceptions: torch.nn.Softplus returns x itself where beta*x > 20, a
# deliberate shortcut; the exact value differs by at most exp(-20)/beta ~ 2.1e-9.
REFERENCE_MATH_TOL = {"softplus": 3e-9, "softplus:beta=2": 3e-9}


@pytest.mark.parametrize("spec", sorted(TORCH_REFERENCE))
def test_module_matches_torch_value_and_autograd(spec: str) -> None:
    ours = actlab.activation(spec).double().eval()
    theirs = TORCH_REFERENCE[spec]().double().eval()
    y, dy = _value_and_grad(ours, GRID)
    y_ref, dy_ref = _value_and_grad(theirs, GRID)
    assert _close(y, y_ref) <= TOL
    assert _close(dy, dy_ref) <= TOL


@pytest.mark.parametrize("spec", sorted(TORCH_REFERENCE))
def test_reference_math_matches_torch(spec: str) -> None:
    f, df = resolve_elementwise(spec)
    assert df is not None
    theirs = TORCH_REFERENCE[spec]().double().eval()
    y_ref, dy_ref = _value_and_grad(theirs, GRID)
    tol = REFERENCE_MATH_TOL.get(spec, TOL)
    assert _close(f(GRID), y_ref) <= tol
    assert _close(df(GRID), dy_ref) <= tol
    if spec in REFERENCE_MATH_TOL:  # the exception really is confined to beta*x > 20
        beta = 2.0 if "beta=2" in spec else 1.0
        below = beta * GRID <= 20
        assert _close(f(GRID[below]), y_ref[below]) <= TOL
        assert _close(df(GRID[below]), dy_ref[below]) <= TOL


# Activations PyTorch lacks: checked against their closed forms written out here.
def _gelu_exact(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.erf(x / 2**0.5))


CLOSED_FORMS = {
    "relu2": lambda x: torch.where(x > 0, x * x, torch.zeros_like(x)),
    "gelu2": lambda x: _gelu_exact(x) ** 2,
    "silu:beta=1.5": lambda x: x / (1.0 + torch.exp(-1.5 * x)),
    "sugar": lambda x: torch.where(x > 0, x, torch.zeros_like(x)),
}


@pytest.mark.parametrize("spec", sorted(CLOSED_FORMS))
def test_activations_without_torch_module_match_closed_form(spec: str) -> None:
    y = actlab.activation(spec).double()(GRID)
    assert _close(y, CLOSED_FORMS[spec](GRID)) <= TOL
    f, _ = resolve_elementwise(spec)
    assert _close(f(GRID), CLOSED_FORMS[spec](GRID)) <= TOL


KINKED = {"relu", "leaky_relu", "prelu", "selu", "relu2", "noisy_relu", "elu:alpha=0.5",
          "leaky_relu:slope=0.2"}
ALL_SMOOTH_OR_KINKED = sorted(
    set(TORCH_REFERENCE) | {"relu2", "gelu2", "silu:beta=1.5", "gelu2:tanh", "silu:learnable"}
)


@pytest.mark.parametrize("spec", ALL_SMOOTH_OR_KINKED)
def test_derivatives_match_central_differences(spec: str) -> None:
    """Module autograd and the analytic f' against central differences (away from kinks)."""
    module = actlab.activation(spec).double().eval()
    h = 1e-6
    x = GRID[GRID.abs() > 1e-3] if spec.split(":")[0] in {k.split(":")[0] for k in KINKED} \
        else GRID
    if spec.startswith("softplus"):  # torch's shortcut jumps by ~2e-9 at beta*x = 20
        beta = 2.0 if "beta=2" in spec else 1.0
        x = x[(beta * x - 20).abs() > 1e-3]
    with torch.no_grad():
        numeric = (module(x + h) - module(x - h)) / (2 * h)
        scale = module(x).abs().clamp_min(1.0)
    _, autograd = _value_and_grad(module, x)
    assert float(((autograd - numeric).abs() / scale).max()) < 1e-6
    _, df = resolve_elementwise(spec)
    assert float(((df(x) - numeric).abs() / scale).max()) < 1e-6


GRADCHECK_SPECS = [
    "relu", "leaky_relu", "prelu", "elu", "selu", "gelu", "gelu:tanh", "silu", "silu:learnable",
    "sigmoid", "tanh", "softplus", "mish", "relu2", "gelu2", "identity",
    "relu:shift=theory", "gelu:shift=0.1", "tanh:shift=0.2", "sigmoid:clip=0.7",
    "relu2:clip=2", "gelu:adaptive", "mish:adaptive", "elu:shift=0.2", "sigmoid:adaptive",
    "silu:adaptive:momentum=0.5", "gelu:topk=0.3",
    "relu:clip=1:shift=0.2:adaptive:topk=0.5",
]


@pytest.mark.parametrize("spec", GRADCHECK_SPECS)
def test_gradcheck(spec: str) -> None:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 7, generator=gen, dtype=torch.float64) * 2
    x = x + 0.05 * torch.sign(x)  # keep away from the kink at 0 and the clip levels
    module = actlab.activation(spec).double()
    if "momentum" in spec:  # a training call updates the EMA, so fix it: eval mode
        module(x)
        module.eval()
    assert torch.autograd.gradcheck(module, (x.requires_grad_(True),))


def test_sugar_backward_is_the_surrogate() -> None:
    x = GRID.clone().requires_grad_(True)
    module = actlab.activation("sugar:alpha=1.2").double()
    y = module(x)
    (grad,) = torch.autograd.grad(y.sum(), x)
    s = torch.sigmoid(GRID)
    expected = s + (GRID + 1.2) * s * (1.0 - s)
    assert _close(grad, expected) <= TOL
    assert float(grad[GRID < -1].abs().max()) > 0  # not ReLU's zero gradient
    assert torch.equal(y.detach(), torch.relu(GRID))
    _, df = resolve_elementwise("sugar:alpha=1.2")
    assert _close(df(GRID), expected) <= TOL


def test_noisy_relu_noise_only_on_negative_inputs_in_train_mode() -> None:
    torch.manual_seed(0)
    module = actlab.activation("noisy_relu:p=2").double()
    x = torch.linspace(-5, 5, 2001, dtype=torch.float64).repeat(8, 1)
    module.train()
    y = module(x)
    positive = x > 0
    assert torch.equal(y[positive], x[positive])
    negative_noise = y[x < -0.5]
    assert bool((negative_noise > 0).all())  # half-normal noise, scale > 0 where x < -0.5
    assert negative_noise.std() > 0.01
    # the noise scale c (sigmoid(p δ) - 1/2)^2 grows with the distance below 0
    far, near = y[x < -4].mean(), y[(x > -1) & (x < 0)].mean()
    assert far > near
    # gradient reaches the learnable p
    y.sum().backward()
    assert module.core.p.grad is not None and float(module.core.p.grad.abs()) > 0
    module.eval()
    assert torch.equal(module(x), torch.relu(x))


def _noisy_reference(x: torch.Tensor, p: float, c: float, alpha: float, seed: int
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """"Bug or Feature²" App. D.7 written out by hand: the output and the noise term, with
    the noise drawn after ``torch.manual_seed(seed)`` as the module draws it."""
    torch.manual_seed(seed)
    eps = torch.randn_like(x).abs()
    delta = torch.where(x < 0, -x, torch.zeros_like(x))
    sigma = c * (torch.sigmoid(p * delta) - 0.5) ** 2
    noise = torch.where(x < 0, sigma * eps, torch.zeros_like(x))
    return alpha * torch.relu(x) + (1 - alpha) * x + noise, noise


@pytest.mark.parametrize("spec", ["noisy_relu", "noisy_relu:p=0.5:c=2:alpha=0.3"])
def test_noisy_relu_has_only_p_as_parameter(spec: str) -> None:
    module = actlab.activation(spec)
    assert [name for name, _ in module.named_parameters()] == ["core.p"]
    assert "core.c" not in module.state_dict() and "core.alpha" not in module.state_dict()
    # an optimizer step moves p only; c and alpha stay the spec's constants
    c, alpha = module.core.c, module.core.alpha
    optimizer = torch.optim.Adam(module.parameters(), lr=0.1)
    torch.manual_seed(0)
    module.train()
    module(torch.randn(64, 16)).sum().backward()
    optimizer.step()
    assert (module.core.c, module.core.alpha) == (c, alpha)


def test_noisy_relu_alpha_one_is_relu_plus_noise_exactly() -> None:
    module = actlab.activation("noisy_relu:p=1.5").double().train()
    x = torch.randn(32, 50, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    torch.manual_seed(11)
    y = module(x)
    expected, noise = _noisy_reference(x, 1.5, 1.0, 1.0, seed=11)
    assert torch.equal(y, torch.relu(x) + noise)
    assert torch.equal(y, expected)
    assert float(noise.abs().max()) > 0  # noise was really added


def test_noisy_relu_alpha_half_carries_the_identity_branch() -> None:
    module = actlab.activation("noisy_relu:p=1.5:c=2:alpha=0.5").double().train()
    x = torch.randn(32, 50, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    torch.manual_seed(12)
    with torch.no_grad():
        y = module(x)
    expected, noise = _noisy_reference(x, 1.5, 2.0, 0.5, seed=12)
    assert torch.allclose(y, expected, rtol=0, atol=1e-15)
    negative = x < 0
    # below zero: (1 - α) x plus the noise; above: α x + (1 - α) x = x
    assert torch.allclose((y - noise)[negative], 0.5 * x[negative], rtol=0, atol=1e-15)
    assert torch.allclose(y[~negative], x[~negative], rtol=0, atol=1e-15)
    assert float((y - torch.relu(x) - noise)[negative].abs().min()) > 0  # not ReLU + noise


def test_noisy_relu_gradient_of_p_formula_and_finite_differences() -> None:
    p, c = 0.8, 1.5
    module = actlab.activation(f"noisy_relu:p={p}:c={c}").double().train()
    x = torch.randn(16, 40, dtype=torch.float64, generator=torch.Generator().manual_seed(5)) * 3
    w = torch.randn(16, 40, dtype=torch.float64, generator=torch.Generator().manual_seed(6))

    def objective() -> torch.Tensor:
        torch.manual_seed(21)  # the same noise on every call
        return (w * module(x)).sum()

    p = float(module.core.p.detach())  # the float32 initial value, cast to float64
    objective().backward()
    autograd = float(module.core.p.grad)
    # d/dp of c (σ(p δ) − ½)² |ε| = 2 c (σ − ½) σ (1 − σ) δ |ε|, only where x < 0
    torch.manual_seed(21)
    eps = torch.randn_like(x).abs()
    delta = (-x).clamp_min(0)
    s = torch.sigmoid(p * delta)
    formula = float((w * 2 * c * (s - 0.5) * s * (1 - s) * delta * eps).sum())
    assert abs(formula) > 1e-3
    assert autograd == pytest.approx(formula, rel=1e-12)
    h = 1e-6
    with torch.no_grad():
        module.core.p.fill_(p + h)
        up = float(objective())
        module.core.p.fill_(p - h)
        down = float(objective())
    assert (up - down) / (2 * h) == pytest.approx(formula, rel=1e-7)


def test_noisy_relu_loads_old_state_dicts_with_c_and_alpha() -> None:
    # as saved when c and alpha were parameters (and the core was listed twice)
    tensors = {"p": torch.tensor([0.7]), "c": torch.tensor(1.0), "alpha": torch.tensor(1.0)}
    old = {f"{where}.{k}": v for where in ("core", "_plain_fn") for k, v in tensors.items()}
    module = actlab.activation("noisy_relu")
    module.load_state_dict(old)  # the values agree with the spec: loads
    assert float(module.core.p.detach()) == pytest.approx(0.7)
    assert list(module.state_dict()) == ["core.p"]
    moved = {**old, "core.alpha": torch.tensor(0.97)}
    with pytest.raises(RuntimeError, match=r"alpha=0\.97.*'noisy_relu:alpha=0\.97"):
        actlab.activation("noisy_relu").load_state_dict(moved)
    actlab.activation("noisy_relu:alpha=0.97").load_state_dict(moved)


# The handbook's worked example: values and slopes at z = -1.5, 0, 0.5 (4 decimals).
WORKED = {
    "sigmoid": ([0.1824, 0.5000, 0.6225], [0.1491, 0.2500, 0.2350]),
    "tanh": ([-0.9051, 0.0, 0.4621], [0.1807, 1.0, 0.7864]),
    "relu": ([0.0, 0.0, 0.5000], [0.0, 0.0, 1.0]),
    "leaky_relu": ([-0.0150, 0.0, 0.5000], [0.0100, 0.0100, 1.0]),
    "elu": ([-0.7769, 0.0, 0.5000], [0.2231, 1.0, 1.0]),
    "gelu": ([-0.1002, 0.0, 0.3457], [-0.1275, 0.5000, 0.8675]),
    "silu": ([-0.2736, 0.0, 0.3112], [-0.0413, 0.5000, 0.7400]),
    "softplus": ([0.2014, 0.6931, 0.9741], [0.1824, 0.5000, 0.6225]),
}


@pytest.mark.parametrize("spec", sorted(WORKED))
def test_worked_example(spec: str) -> None:
    z = torch.tensor([-1.5, 0.0, 0.5], dtype=torch.float64)
    values, slopes = WORKED[spec]
    y, dy = _value_and_grad(actlab.activation(spec).double(), z)
    assert torch.allclose(y, torch.tensor(values, dtype=torch.float64), rtol=0, atol=5e-5)
    assert torch.allclose(dy, torch.tensor(slopes, dtype=torch.float64), rtol=0, atol=5e-5)
    _, df = resolve_elementwise(spec)
    assert torch.allclose(df(z), torch.tensor(slopes, dtype=torch.float64), rtol=0, atol=5e-5)
