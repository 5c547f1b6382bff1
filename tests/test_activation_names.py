"""The activation names of torch.nn, timm and transformers resolve to the same function.

References: the torch.nn modules and transformers' ACT2FN modules themselves (outputs and
input gradients in float64, parameter gradients for the learnable ones); timm is not
installed, so its own classes are written out from its source (timm/layers/activations.py
and create_act.py of huggingface/pytorch-image-models). ``shift=theory`` on the new names is
checked against a dense trapezoid integral of the reference module, and ``spec_of`` /
``activation(module)`` against the same modules.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import actlab
from actlab.activations import resolve_elementwise
from actlab.activations.grammar import canonical_spec
from actlab.activations.registry import register_activation, unregister_activation
from actlab.errors import SpecError

torch.manual_seed(0)
# Wide random inputs plus the kinks of every piecewise function here.
KINKS = [-3.0, -2.0, -1.0, -1e-6, 0.0, 0.5, 1.0, 3.0, 6.0]
X = torch.cat([torch.linspace(-9, 9, 181, dtype=torch.float64),
               3 * torch.randn(200, dtype=torch.float64),
               torch.tensor(KINKS, dtype=torch.float64)])
UPSTREAM = torch.randn_like(X)
# Points at least 1e-3 from every kink, where an analytic derivative is defined.
SMOOTH = X[torch.stack([(X - k).abs() > 1e-3 for k in KINKS]).all(0)]

TORCH = [
    ("relu", nn.ReLU()), ("relu6", nn.ReLU6()), ("leaky_relu", nn.LeakyReLU()),
    ("leaky_relu:slope=0.2", nn.LeakyReLU(0.2)), ("prelu", nn.PReLU()),
    ("prelu:slope=0.125", nn.PReLU(init=0.125)), ("elu", nn.ELU()), ("elu:alpha=0.5", nn.ELU(0.5)),
    ("selu", nn.SELU()), ("celu", nn.CELU()), ("celu:alpha=1.5", nn.CELU(1.5)),
    ("gelu", nn.GELU()), ("gelu:tanh", nn.GELU(approximate="tanh")), ("silu", nn.SiLU()),
    ("mish", nn.Mish()), ("hardswish", nn.Hardswish()), ("hardsigmoid", nn.Hardsigmoid()),
    ("hardtanh", nn.Hardtanh()), ("hardtanh:min_val=-2:max_val=0.5", nn.Hardtanh(-2, 0.5)),
    ("sigmoid", nn.Sigmoid()), ("tanh", nn.Tanh()), ("softplus", nn.Softplus()),
    ("softplus:beta=2", nn.Softplus(beta=2)), ("softsign", nn.Softsign()),
    ("logsigmoid", nn.LogSigmoid()), ("tanhshrink", nn.Tanhshrink()),
    ("identity", nn.Identity()),
]


class _Formula(nn.Module):
    """A reference written out from a library's source."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


# timm/layers/create_act.py, _ACT_LAYER_DEFAULT (+ the 'hardsigmoid'/'hardswish' setdefaults):
# the class each name gives on a PyTorch with native silu/mish/hardswish/hardsigmoid, as a
# torch module, or as the formula of timm's own class (timm/layers/activations.py).
TIMM = {
    "silu": nn.SiLU(), "swish": nn.SiLU(), "mish": nn.Mish(), "relu": nn.ReLU(),
    "relu6": nn.ReLU6(), "leaky_relu": nn.LeakyReLU(), "elu": nn.ELU(),
    "prelu": nn.PReLU(num_parameters=1, init=0.25), "celu": nn.CELU(), "selu": nn.SELU(),
    "gelu": _Formula(lambda x: F.gelu(x)),
    "gelu_tanh": _Formula(lambda x: F.gelu(x, approximate="tanh")),
    "quick_gelu": _Formula(lambda x: x * torch.sigmoid(1.702 * x)),
    "sigmoid": _Formula(lambda x: x.sigmoid()), "tanh": _Formula(lambda x: x.tanh()),
    "hard_sigmoid": nn.Hardsigmoid(), "hard_swish": nn.Hardswish(),
    "hard_mish": _Formula(lambda x: 0.5 * x * (x + 2).clamp(min=0, max=2)),
    "identity": nn.Identity(), "hardsigmoid": nn.Hardsigmoid(), "hardswish": nn.Hardswish(),
}


def _same(ours: nn.Module, ref: nn.Module, *, rtol: float = 1e-12, atol: float = 1e-13,
          offset: float = 0.0) -> None:
    """Equal outputs (``ref`` minus ``offset``), input gradients and parameter gradients."""
    ours, ref = ours.double(), ref.double()
    xs = [X.clone().requires_grad_(True) for _ in range(2)]
    y_ours, y_ref = ours(xs[0]), ref(xs[1]) - offset
    torch.testing.assert_close(y_ours, y_ref, rtol=rtol, atol=atol)
    (y_ours * UPSTREAM).sum().backward()
    (y_ref * UPSTREAM).sum().backward()
    torch.testing.assert_close(xs[0].grad, xs[1].grad, rtol=rtol, atol=atol)
    grads_ours = [p.grad for p in ours.parameters()]
    grads_ref = [p.grad for p in ref.parameters()]
    assert len(grads_ours) == len(grads_ref)
    for a, b in zip(grads_ours, grads_ref):
        torch.testing.assert_close(a.reshape(b.shape), b, rtol=rtol, atol=1e-10)


def _fresh(module: nn.Module) -> nn.Module:
    """A fresh copy of a reference (tests must not share gradients)."""
    return copy.deepcopy(module)


def _dense_mean(module: nn.Module, q: float = 1 / 3) -> float:
    """E module(z), z ~ N(0, q), by the trapezoid rule on 100 001 points over ±13 sd."""
    sd = math.sqrt(q)
    z = torch.linspace(-13 * sd, 13 * sd, 100_001, dtype=torch.float64)
    with torch.no_grad():
        values = module.double()(z) * torch.exp(-z * z / (2 * q)) / math.sqrt(2 * math.pi * q)
    return float(torch.trapezoid(values, z))


# ------------------------------------------------------------------------------ torch.nn
@pytest.mark.parametrize(("spec", "module"), TORCH, ids=[s for s, _ in TORCH])
def test_torch_module_same_function_and_gradients(spec: str, module: nn.Module) -> None:
    _same(actlab.activation(spec), _fresh(module))
    _same(actlab.activation(_fresh(module)), _fresh(module))  # activation(module) too
    assert actlab.spec_of(module) == canonical_spec(spec)


@pytest.mark.parametrize(("spec", "module"), TORCH, ids=[s for s, _ in TORCH])
def test_torch_module_with_a_shift_on_top(spec: str, module: nn.Module) -> None:
    # a numeric shift takes the in-place path where the kernel allows it: autograd must
    # still be right (it raises if a saved output was overwritten)
    _same(actlab.activation(f"{spec}:shift=0.25"), _fresh(module), offset=0.25)


@pytest.mark.parametrize(("spec", "module"), TORCH, ids=[s for s, _ in TORCH])
def test_reference_math_and_derivative_match_the_torch_module(spec: str,
                                                              module: nn.Module) -> None:
    # the elementwise math theory integrates (resolve_elementwise), against the module
    f, df = resolve_elementwise(spec)
    ref = _fresh(module).double()
    x = SMOOTH.clone().requires_grad_(True)
    y = ref(x)
    (slope,) = torch.autograd.grad(y.sum(), x)
    torch.testing.assert_close(f(SMOOTH), y.detach(), rtol=1e-12, atol=1e-13)
    # torch's hardsigmoid backward multiplies by 1.0f / 6.0f, a float32 constant
    rtol = 1e-7 if spec == "hardsigmoid" else 1e-10
    torch.testing.assert_close(df(SMOOTH), slope, rtol=rtol, atol=1e-12)


@pytest.mark.parametrize("cls", [nn.GELU, nn.ReLU6, nn.Hardswish, nn.Mish, nn.Softsign])
def test_activation_accepts_a_class(cls: type[nn.Module]) -> None:
    _same(actlab.activation(cls), cls())
    assert actlab.spec_of(cls) == actlab.spec_of(cls())


# ------------------------------------------------------------------------------ timm
@pytest.mark.parametrize("name", sorted(TIMM))
def test_timm_name_same_function_and_gradients(name: str) -> None:
    _same(actlab.activation(name), _fresh(TIMM[name]))
    _same(actlab.activation(name.upper()), _fresh(TIMM[name]))  # get_act_layer lower-cases


# ------------------------------------------------------------------------------ transformers
@pytest.fixture(scope="module")
def hf():
    return pytest.importorskip("transformers.activations")


HF_ELEMENTWISE = ["gelu", "gelu_10", "gelu_fast", "gelu_new", "gelu_python", "gelu_pytorch_tanh",
                  "gelu_python_tanh", "gelu_accurate", "hardswish", "laplace", "leaky_relu",
                  "linear", "mish", "quick_gelu", "relu", "relu2", "relu6", "sigmoid", "silu",
                  "sqrtsoftplus", "swish", "tanh", "prelu"]


def test_every_act2fn_name_is_covered(hf) -> None:
    # a new name in transformers' table fails here until it is registered and tested
    assert set(hf.ACT2CLS) == set(HF_ELEMENTWISE) | {"xielu"}


@pytest.mark.parametrize("name", HF_ELEMENTWISE)
def test_transformers_name_same_function_and_gradients(hf, name: str) -> None:
    # gelu_fast writes sqrt(2/pi) as 0.7978845608: equal to about 1e-11 relative
    rtol = 1e-9 if name == "gelu_fast" else 1e-12
    _same(actlab.activation(name), hf.ACT2FN[name], rtol=rtol)
    module = hf.ACT2FN[name]
    assert actlab.spec_of(module) == canonical_spec(name)
    _same(actlab.activation(module), hf.ACT2FN[name], rtol=rtol)


def test_transformers_xielu_same_function_and_gradients(hf) -> None:
    ref = hf.XIELUActivation(dtype=torch.float64)
    ours = actlab.activation("xielu").double()
    # the initial parameters agree to float32 rounding (ours are stored in float32) ...
    torch.testing.assert_close(ours.core.alpha_p.reshape(()), ref.alpha_p.reshape(()),
                               rtol=1e-6, atol=0)
    torch.testing.assert_close(ours.core.alpha_n.reshape(()), ref.alpha_n.reshape(()),
                               rtol=1e-6, atol=0)
    # ... and with the same parameters, the same function and gradients (parameters too)
    with torch.no_grad():
        ours.core.alpha_p.copy_(ref.alpha_p.reshape(ours.core.alpha_p.shape))
        ours.core.alpha_n.copy_(ref.alpha_n.reshape(ours.core.alpha_n.shape))
    _same(ours, ref)


def test_transformers_xielu_spec_round_trip(hf) -> None:
    ref = hf.XIELUActivation(alpha_p_init=1.3, alpha_n_init=0.9, beta=0.25,
                             dtype=torch.float64)
    spec = actlab.spec_of(ref)
    assert spec.startswith("xielu:alpha_p=1.3") and ":beta=0.25" in spec
    x = X.float()
    torch.testing.assert_close(actlab.activation(spec)(x), ref.float()(x), rtol=1e-6, atol=1e-6)


def test_transformers_clipped_gelu_beyond_a_clip_has_no_spec(hf) -> None:
    assert actlab.spec_of(hf.ClippedGELUActivation(-10, 5)) == "gelu:clip=5"
    with pytest.raises(SpecError, match="clips from above only"):
        actlab.spec_of(hf.ClippedGELUActivation(-0.1, 5))


# ------------------------------------------------------------------------------ options
NEW = ["relu6", "hardtanh", "hardtanh:min_val=-0.5:max_val=2", "hardsigmoid", "hardswish",
       "hard_mish", "softsign", "logsigmoid", "tanhshrink", "celu:alpha=0.7", "laplace",
       "sqrtsoftplus", "xielu", "gelu_10"]


def _reference_of(spec: str) -> nn.Module:
    """The library module or source formula each new name is checked against above."""
    table = {canonical_spec(s): m for s, m in TORCH}
    table.update({canonical_spec(n): m for n, m in TIMM.items()})
    if spec in ("laplace", "sqrtsoftplus", "xielu", "gelu_10"):
        hf = pytest.importorskip("transformers.activations")
        if spec == "xielu":
            return hf.XIELUActivation(dtype=torch.float64)
        return hf.ACT2FN[spec]
    if spec == "hardtanh:min_val=-0.5:max_val=2":
        return nn.Hardtanh(-0.5, 2.0)
    if spec == "celu:alpha=0.7":
        return nn.CELU(0.7)
    return _fresh(table[canonical_spec(spec)])


@pytest.mark.parametrize("spec", NEW)
def test_theory_shift_of_a_new_name_is_the_gaussian_mean_of_its_module(spec: str) -> None:
    for q in (1 / 3, 2.0):
        module = actlab.activation(f"{spec}:shift=theory:q={q!r}")
        # rtol 1e-6: xielu's initial parameters are float32-rounded in ours (see above)
        assert module.shift == pytest.approx(_dense_mean(_reference_of(spec), q), rel=1e-6,
                                             abs=1e-9)


def test_transformers_spelling_with_theory_shift_is_the_torch_gelu_tanh_minus_its_mean() -> None:
    module = actlab.activation("gelu_pytorch_tanh:shift=theory")
    assert module.spec == "gelu:tanh:shift=theory"
    reference = nn.GELU(approximate="tanh")
    mean = _dense_mean(reference)
    assert module.shift == pytest.approx(mean, abs=1e-9)
    _same(module, nn.GELU(approximate="tanh"), offset=mean, rtol=1e-9, atol=1e-9)
    # adaptive on top: every row centred
    y = actlab.activation("gelu_new:adaptive")(torch.randn(4, 32, dtype=torch.float64))
    torch.testing.assert_close(y.mean(-1), torch.zeros(4, dtype=torch.float64))


def test_theory_shift_refused_where_the_gaussian_mean_is_not_finite() -> None:
    register_activation("sqrt_user", torch.sqrt)  # NaN for every negative input
    try:
        assert math.isnan(resolve_elementwise("sqrt_user")[0](torch.tensor([-1.0])).item())
        with pytest.raises(SpecError, match="shift=theory has no value"):
            actlab.activation("sqrt_user:shift=theory")
    finally:
        unregister_activation("sqrt_user")


# ------------------------------------------------------------------------------ spec_of
def test_spec_of_learned_parameters_round_trip() -> None:
    prelu = nn.PReLU()
    with torch.no_grad():
        prelu.weight.fill_(0.3)
    assert actlab.spec_of(prelu) == "prelu:slope=0.3"
    ours = actlab.activation("prelu:slope=0.1")
    assert actlab.spec_of(ours) == "prelu:slope=0.1"  # unmoved: the spec's own number
    swish = actlab.activation("silu:beta=1.5:learnable")
    xielu = actlab.activation("xielu:alpha_p=0.5")
    with torch.no_grad():
        ours.core.weight.add_(0.05)
        swish.core.beta.mul_(1.1)
        xielu.core.alpha_p.add_(0.1)
        xielu.core.alpha_n.sub_(0.2)
    for module in (prelu, ours, swish, xielu):
        spec = actlab.spec_of(module)
        rebuilt = actlab.activation(spec)
        assert actlab.spec_of(rebuilt) == spec
        with torch.no_grad():
            assert torch.equal(rebuilt(X.float()), module(X.float())), spec
    assert ":learnable" in actlab.spec_of(swish)


def test_spec_of_actlab_module_and_act_layer_class() -> None:
    module = actlab.activation("quick_gelu:adaptive:topk=0.5")
    assert actlab.spec_of(module) == "silu:beta=1.702:adaptive:topk=0.5"
    assert actlab.spec_of(actlab.act_layer("gelu_new")) == "gelu:tanh"
    # activation() of an actlab module is a copy with its state
    adaptive = actlab.activation("gelu:adaptive:momentum=0.5")
    adaptive(torch.randn(8, 16))
    duplicate = actlab.activation(adaptive)
    assert duplicate is not adaptive
    assert torch.equal(duplicate.center.running_mean, adaptive.center.running_mean)


@pytest.mark.parametrize(("module", "words"), [
    (nn.GLU(), "GLU"), (nn.Softmax(dim=-1), "Softmax"), (nn.PReLU(4), "per channel"),
    (nn.Softplus(threshold=5), "threshold"), (nn.Linear(2, 2), "Linear"),
])
def test_spec_of_refuses_modules_without_a_spec(module: nn.Module, words: str) -> None:
    with pytest.raises(SpecError, match=words):
        actlab.spec_of(module)
    with pytest.raises(SpecError, match=words):
        actlab.activation(module)


def test_spec_of_a_subclass_only_when_it_computes_what_its_base_does() -> None:
    class Plain(nn.ReLU6):
        pass

    class Own(nn.ReLU):
        def forward(self, x):
            return x.abs()

    assert actlab.spec_of(Plain()) == "relu6"
    with pytest.raises(SpecError, match="has its own forward"):
        actlab.spec_of(Own())


def _timm_class(name: str, forward, base: type = nn.Module) -> type:
    """A stand-in for timm's class ``name``: its module and name, and its source's forward."""
    return type(name, (base,), {"__module__": "timm.layers.activations", "__qualname__": name,
                                "forward": lambda self, x: forward(x)})


@pytest.mark.parametrize(("cls", "spec"), [
    (_timm_class("HardMish", lambda x: 0.5 * x * (x + 2).clamp(min=0, max=2)), "hard_mish"),
    (_timm_class("QuickGELU", lambda x: x * torch.sigmoid(1.702 * x)), "silu:beta=1.702"),
    (_timm_class("GELUTanh", lambda x: F.gelu(x, approximate="tanh")), "gelu:tanh"),
])
def test_timm_classes_by_module_and_name(cls: type, spec: str) -> None:
    assert actlab.spec_of(cls) == spec
    _same(actlab.activation(cls), cls())


def test_activation_of_a_class_that_needs_arguments_says_so() -> None:
    with pytest.raises(SpecError, match="without arguments"):
        actlab.activation(nn.Threshold)


# ------------------------------------------------------------------------------ errors
@pytest.mark.parametrize(("spec", "names"), [
    ("gelu_pytorch_tanhh", "'gelu_pytorch_tanh'"), ("hardswich", "'hardswish'"),
    ("quickgelu", "'quick_gelu'"), ("hard_mesh", "'hard_mish'"), ("relu_6", "'relu6'"),
])
def test_unknown_names_name_the_closest_valid_ones(spec: str, names: str) -> None:
    with pytest.raises(SpecError, match="unknown activation") as info:
        actlab.activation(spec)
    assert names in str(info.value)


@pytest.mark.parametrize(("spec", "words"), [
    ("quick_gelu:beta=2", "set by the name 'quick_gelu'"),
    ("gelu_new:tanh", "set by the name 'gelu_new'"),
    ("hardtanh:min_val=1:max_val=1", "must be below max_val"),
    ("xielu:alpha_n=0.5", "must exceed beta"),
    ("celu:alpha=0", "non-zero"),
    ("laplace:sigma=-1", "> 0"),
])
def test_bad_options_on_the_new_names(spec: str, words: str) -> None:
    with pytest.raises(SpecError, match=words):
        actlab.activation(spec)


def test_bounds_of_the_bounded_new_names() -> None:
    for spec, bounds in [("relu6", (0.0, 6.0)), ("hardsigmoid", (0.0, 1.0)),
                         ("softsign", (-1.0, 1.0)), ("laplace", (0.0, 1.0)),
                         ("hardtanh:min_val=-2:max_val=3", (-2.0, 3.0))]:
        module = actlab.activation(spec)
        assert module.bounded and module.bounds == bounds
        y = module(X.float() * 10)
        assert bounds[0] <= float(y.min()) and float(y.max()) <= bounds[1]
