"""A spec where other libraries take an activation: ``act_layer=`` classes (timm and
torchvision style) and ``hidden_act="actlab:SPEC"`` in Hugging Face configs, saved and
reloaded in a fresh process."""

from __future__ import annotations

import copy
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import actlab
from actlab.activations.spec_activation import SpecActivation
from actlab.errors import SpecError

SRC = str(Path(__file__).resolve().parents[1] / "src")


# ------------------------------------------------------------------------------ act_layer
def _timm_create_act_layer(act_layer, inplace=None, **kwargs):
    """timm/layers/create_act.py's create_act_layer, for a class (get_act_layer returns a
    class as it is)."""
    if inplace is None:
        return act_layer(**kwargs)
    try:
        return act_layer(inplace=inplace, **kwargs)
    except TypeError:
        return act_layer(**kwargs)


class _ConvNormActivation(nn.Sequential):
    """The shape of torchvision's Conv2dNormActivation: the activation class is called with
    ``inplace`` only when one is given."""

    def __init__(self, activation_layer, inplace: bool | None = True) -> None:
        params = {} if inplace is None else {"inplace": inplace}
        super().__init__(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8),
                         activation_layer(**params))


def test_act_layer_is_a_class_built_with_and_without_inplace() -> None:
    cls = actlab.act_layer("gelu_pytorch_tanh:adaptive")
    assert isinstance(cls, type) and issubclass(cls, nn.Module)
    modules = [cls(), cls(inplace=True), cls(inplace=False), _timm_create_act_layer(cls, True),
               _timm_create_act_layer(cls)]
    for module in modules:
        assert isinstance(module, SpecActivation) and module.spec == "gelu:tanh:adaptive"
    assert len({id(m.center) for m in modules}) == len(modules)  # no shared state
    x = torch.randn(4, 16)
    before = x.clone()
    y = cls(inplace=True)(x)
    assert torch.equal(x, before)  # inplace is accepted and ignored
    expected = nn.functional.gelu(before, approximate="tanh")
    torch.testing.assert_close(y, expected - expected.mean(-1, keepdim=True))


def test_act_layer_in_a_torchvision_style_block_pickles_and_copies() -> None:
    torch.manual_seed(0)
    block = _ConvNormActivation(actlab.act_layer("hard_swish:shift=theory")).eval()
    other = _ConvNormActivation(actlab.act_layer("relu6"), inplace=None).eval()
    assert block[2].spec == "hardswish:shift=theory" and other[2].spec == "relu6"
    x = torch.randn(2, 3, 5, 5)
    buffer = io.BytesIO()
    torch.save(block, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    for twin in (loaded, copy.deepcopy(block)):
        assert torch.equal(twin(x), block(x))
    assert block[2].shift == pytest.approx(actlab.activation("hardswish:shift=theory").shift)


def test_act_layer_checks_the_spec_at_once() -> None:
    with pytest.raises(SpecError, match="did you mean 'hard_swish'"):
        actlab.act_layer("hard_swich")
    with pytest.raises(TypeError):
        actlab.act_layer("relu")(slope=2)  # only inplace= is a keyword of the class


# ------------------------------------------------------------------------------ hidden_act
@pytest.fixture(scope="module")
def hf():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    transformers = pytest.importorskip("transformers")
    from actlab.integrations.transformers import register

    register()
    register()  # twice does nothing
    return transformers


def test_register_keeps_the_names_of_transformers(hf) -> None:
    from transformers.activations import ACT2FN, GELUActivation, get_activation

    assert isinstance(ACT2FN["gelu"], GELUActivation)
    assert "gelu" in ACT2FN and "actlab:relu" in ACT2FN
    module = get_activation("actlab:relu6:shift=theory")
    assert isinstance(module, SpecActivation) and module.spec == "relu6:shift=theory"
    assert ACT2FN["actlab:gelu"] is not ACT2FN["actlab:gelu"]  # one module per look-up
    with pytest.raises(SpecError, match="did you mean 'gelu'"):
        ACT2FN["actlab:gelux"]
    with pytest.raises(KeyError):
        ACT2FN["no_such_activation"]


def _small_models(hf) -> dict[str, nn.Module]:
    torch.manual_seed(0)
    llama = hf.LlamaForCausalLM(hf.LlamaConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, hidden_act="actlab:gelu:adaptive"))
    bert = hf.BertModel(hf.BertConfig(
        vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=32, hidden_act="actlab:xielu"), add_pooling_layer=False)
    gpt2 = hf.GPT2LMHeadModel(hf.GPT2Config(
        vocab_size=64, n_embd=16, n_layer=2, n_head=2, n_positions=16,
        activation_function="actlab:quick_gelu:shift=theory", bos_token_id=0,
        eos_token_id=0))
    with torch.no_grad():  # learned xIELU coefficients must come back from the checkpoint
        for layer in bert.encoder.layer:
            layer.intermediate.intermediate_act_fn.core.alpha_p.add_(torch.rand(1))
    return {"llama": llama.eval(), "bert": bert.eval(), "gpt2": gpt2.eval()}


RELOAD = """
import json, sys, torch
from transformers import AutoModel, AutoModelForCausalLM
from actlab.integrations.transformers import register
register()
folder = sys.argv[1]
torch.set_num_threads(int(sys.argv[2]))  # the parent's: matmul sums in the same order
ids = torch.load(folder + "/ids.pt")
out = {}
for name, auto in (("llama", AutoModelForCausalLM), ("bert", AutoModel),
                   ("gpt2", AutoModelForCausalLM)):
    model = auto.from_pretrained(folder + "/" + name).eval()
    with torch.no_grad():
        result = model(ids)
    value = result.logits if name != "bert" else result.last_hidden_state
    torch.save(value, f"{folder}/{name}.reloaded.pt")
    out[name] = sorted({type(m).__name__ for m in model.modules()} & {"SpecActivation"})
print(json.dumps(out))
"""


@pytest.mark.slow  # a fresh interpreter imports torch and transformers (several seconds)
def test_hidden_act_models_save_and_reload_in_a_fresh_process(hf, tmp_path) -> None:
    models = _small_models(hf)
    assert models["llama"].model.layers[0].mlp.act_fn.spec == "gelu:adaptive"
    assert models["bert"].encoder.layer[1].intermediate.intermediate_act_fn.spec.startswith(
        "xielu")
    assert models["gpt2"].transformer.h[0].mlp.act.spec == "silu:beta=1.702:shift=theory"
    ids = torch.randint(0, 64, (2, 9), generator=torch.Generator().manual_seed(1))
    torch.save(ids, tmp_path / "ids.pt")
    expected = {}
    with torch.no_grad():
        for name, model in models.items():
            model.save_pretrained(tmp_path / name)
            result = model(ids)
            expected[name] = result.logits if name != "bert" else result.last_hidden_state
    assert json.loads((tmp_path / "llama" / "config.json").read_text())["hidden_act"] == \
        "actlab:gelu:adaptive"
    env = {**os.environ, "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    # compared bit for bit, so the child computes on as many threads as this process (an
    # earlier test may have left it at one; a different count reorders the matmul sums)
    done = subprocess.run([sys.executable, "-c", RELOAD, str(tmp_path),
                           str(torch.get_num_threads())], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {
        name: ["SpecActivation"] for name in models}
    for name, value in expected.items():
        assert torch.equal(torch.load(tmp_path / f"{name}.reloaded.pt"), value), name
