"""``patch_`` factories that see the site: ``factory(name, old)``; the old forms (spec, module,
zero-argument factory, class) unchanged; the README's example on a Hugging Face model."""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

import pytest
import torch
from torch import nn

import actlab
from actlab.activations.spec_activation import SpecActivation

README = Path(__file__).resolve().parents[1] / "README.md"


class Net(nn.Module):
    """Sites of several kinds, one module shared by two names, one bounded gate."""

    def __init__(self) -> None:
        super().__init__()
        shared = nn.GELU(approximate="tanh")
        self.a, self.b = nn.Linear(8, 16), nn.Linear(16, 16)
        self.act1 = nn.LeakyReLU(0.2)
        self.block = nn.Sequential(nn.Linear(16, 16), shared)
        self.again = shared
        self.gate = nn.Sigmoid()

    def forward(self, x):
        h = self.act1(self.a(x))
        h = self.again(self.block(h))
        return self.b(h) * self.gate(h)


def test_factory_gets_each_site_name_and_the_module_it_replaces() -> None:
    torch.manual_seed(0)
    model = Net()
    before = dict(actlab.find_activations(model))
    seen: list[tuple[str, nn.Module]] = []

    def factory(name: str, old: nn.Module) -> nn.Module:
        seen.append((name, old))
        return actlab.activation(actlab.spec_of(old) + ":adaptive")

    replaced = actlab.patch_(model, factory)
    # unbounded sites only (the default), the shared module once, under its first name
    assert [name for name, _ in seen] == ["act1", "block.1"] == list(replaced)
    assert all(old is before[name] for name, old in seen)
    assert model.act1.spec == "leaky_relu:slope=0.2:adaptive"
    assert model.block[1] is model.again and model.again.spec == "gelu:tanh:adaptive"
    assert isinstance(model.gate, nn.Sigmoid)
    # the new site computes the old function, centred per example
    x = torch.randn(4, 16)
    y_old = before["act1"](x)
    torch.testing.assert_close(model.act1(x), y_old - y_old.mean(-1, keepdim=True))


def test_factory_may_return_a_spec_and_choose_by_name() -> None:
    model = Net()
    replaced = actlab.patch_(
        model, lambda name, old: "relu" if name.startswith("block") else old, where="*")
    assert isinstance(model.block[1], SpecActivation) and model.block[1].spec == "relu"
    assert model.act1 is replaced["act1"] and model.gate is replaced["gate"]  # kept as they were


@pytest.mark.parametrize(("spec", "kind"), [
    ("silu", SpecActivation), (nn.SiLU(), nn.SiLU), (nn.SiLU, nn.SiLU),
    (lambda: nn.SiLU(), nn.SiLU), (functools.partial(actlab.activation, "silu"), SpecActivation),
    (functools.partial(nn.Hardtanh, -1.0), nn.Hardtanh),  # defaults left: called without any
], ids=["spec", "module", "class", "lambda", "partial", "partial-class-with-defaults"])
def test_old_forms_keep_working(spec, kind: type) -> None:
    model = Net()
    replaced = actlab.patch_(model, spec)
    assert list(replaced) == ["act1", "block.1"]
    assert model.act1 is not model.block[1]  # one new module per site
    assert type(model.act1) is kind and type(model.block[1]) is kind


def test_default_argument_factory_is_called_without_arguments() -> None:
    calls = []

    def factory(spec: str = "relu6") -> nn.Module:
        calls.append(spec)
        return actlab.activation(spec)

    actlab.patch_(Net(), factory)
    assert calls == ["relu6", "relu6"]


def test_bad_factories_are_refused_clearly() -> None:
    with pytest.raises(TypeError, match=r"takes \(old\); give one that takes \(name, old\)"):
        actlab.patch_(Net(), lambda old: old)
    with pytest.raises(TypeError, match="returned int for the site 'act1'"):
        actlab.patch_(Net(), lambda name, old: 3)


def test_new_module_follows_dtype_and_mode_of_the_site() -> None:
    model = Net().double().eval()
    actlab.patch_(model, lambda name, old: actlab.activation("prelu"))
    assert model.act1.core.weight.dtype == torch.float64 and not model.act1.training


def _readme_example() -> str:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("### Names and hooks of torch, timm and Hugging Face"):
                   text.index("## Use actlab in your own training")]
    (code,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    return code


def test_readme_example_adds_adaptive_to_every_activation_of_an_hf_model() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    pytest.importorskip("transformers")
    namespace: dict = {"__name__": "readme_names"}
    exec(compile(_readme_example(), "README-names", "exec"), namespace)
    replaced = namespace["replaced"]
    assert len(replaced) == 2 and all(type(m).__name__ == "GELUActivation"
                                      for m in replaced.values())
    assert namespace["layer"]().spec == "gelu:adaptive"
    # the model built from hidden_act="actlab:gelu:adaptive" has the same sites as the patch
    model = namespace["model"]
    specs = {name: m.spec for name, m in actlab.find_activations(model).items()
             if isinstance(m, SpecActivation)}
    assert specs == {name: "gelu:adaptive" for name in replaced}
