"""The sparsity, sparse-activations, relufication and accumulation-stop experiments, tiny scale."""

from __future__ import annotations

import math

import pytest

from actlab.errors import ConfigError
from actlab.runner.config import build_config
from actlab.runner.experiment import get_experiment

from _inline_run import run_inline

pytestmark = pytest.mark.usefixtures("one_thread")


def _run(name, overrides, tmp_path, seeds=(0,)):
    exp = get_experiment(name)
    summary, _, _ = run_inline(exp, build_config(exp.Config, overrides), tmp_path, [seeds])
    return exp, summary


def test_sparsity_points_fit_and_claims(tmp_path):
    exp, summary = _run("sparsity", {"models": "mlp,mlp-skip", "steps": 25,
                                     "percentile_levels": "0.5,0.9", "topk_levels": "0.5,0.1",
                                     "frozen_models": "mlp", "topk_freeze_after": 10}, tmp_path)
    points = summary["points"]
    assert len(points) == 8  # the frozen-threshold points stay out of the fit
    frozen = summary["frozen_topk"]
    assert frozen["freeze_after"] == 10 and len(frozen["pairs"]) == 2
    for pair in frozen["pairs"]:
        # warm-up steps apply exact Top-K: the first recorded kept share is K up to rounding
        first_step, first_kept = pair["kept_over_training"][0]
        assert first_step == 1 and first_kept == pytest.approx(pair["level"], abs=0.01)
        assert 0 < pair["kept_after_warmup"] < 1 and 0 < pair["kept_eval"] <= 1
        assert pair["difference"] == pytest.approx(pair["frozen_accuracy"] - pair["exact_accuracy"])
    assert any("frozen" in c.claim for c in exp.claims(summary))
    assert {"model", "method", "level", "accuracy", "neg_frac", "sparsity"} <= set(points[0])
    for key in ("A", "B", "N", "r2", "cliff_sparsity"):
        assert key in summary
    # Percentile Centering (LayerNorm flavour, no learned shift) sets ReLU's zero share to q:
    # true by construction, so a test and not a claim of the experiment
    for p in points:
        if p["method"] == "percentile":
            assert p["sparsity"] == pytest.approx(p["level"], abs=0.02)
        else:  # Top-K keeps about a fraction K of GELU's outputs
            assert p["sparsity"] >= 1 - p["level"] - 0.05
    # every group's best point is normalised to 1
    groups = {(p["model"], p["method"]) for p in points}
    for g in groups:
        assert max(p["normalized_accuracy"] for p in points if (p["model"], p["method"]) == g) == 1.0
    mech = summary["mechanism_fit"]  # the indicator model nests the power law
    assert mech["r2"] >= summary["r2"] - 1e-9 and mech["r2_power_law"] == summary["r2"]
    assert mech["r2_gain"] == pytest.approx(mech["r2"] - summary["r2"])
    ids = {c.id for c in exp.claims(summary)}
    assert "sparsity/all/mechanism-secondary" in ids
    assert "sparsity/percentile/centering-sets-sparsity" not in ids
    assert "sparsity/percentile/skip-more-robust" in ids
    assert (tmp_path / "figures" / "sparsity_cliff.png").exists()
    assert (tmp_path / "figures" / "topk_frozen_kept.png").exists()


def test_sparsity_topk_drift_on_random_data(tmp_path):
    exp, summary = _run("sparsity", {"models": "random-mlp", "topk_drift_levels": "0.5,0.1",
                                     "topk_drift_steps": 20}, tmp_path)
    assert summary["points"] == []  # Fig. 8's runs stay out of the cliff fit
    levels = summary["topk_drift"]["levels"]
    assert list(levels) == ["0.1", "0.5", "1"]
    for key, entry in levels.items():
        # Top-K keeps a share K of each row: the eval sparsity is at least 1 - K
        assert entry["sparsity"] >= 1 - entry["level"] - 0.01 if key != "1" else \
            entry["sparsity"] < 0.01
        assert list(entry["grad_mean_per_site"]) == ["layer1", "layer2", "layer3", "layer4"]
        assert math.isfinite(entry["grad_mean"]) and math.isfinite(entry["mean_shift"])
    ids = {c.id for c in exp.claims(summary)}
    assert {"sparsity/topk-drift/gradient-collapses-at-k0.1",
            "sparsity/topk-drift/drift-grows-with-k"} <= ids


def test_sparsity_gpt_rows_loss_shares_flat_region_and_claims(tmp_path):
    exp, summary = _run("sparsity", {"models": "gpt", "frozen_models": "gpt",
                                     "gpt_percentile_levels": "0.3,0.7", "gpt_topk_levels": "0.7,0.3",
                                     "topk_freeze_after": 4, "gpt_steps": 8, "gpt_n_layer": 1,
                                     "gpt_n_embd": 32, "gpt_block_size": 16, "gpt_batch_size": 4,
                                     "gpt_probe_batches": 1}, tmp_path)
    assert summary["points"] == [] and summary["A"] is None  # no accuracies, no cliff fit
    gpt = summary["gpt"]
    points = {(p["method"], p["level"]): p for p in gpt["points"]}
    assert set(points) == {(m, lv) for m in ("percentile", "topk", "topk-frozen") for lv in (0.3, 0.7)
                           if not (m == "percentile" and lv not in (0.3, 0.7))}
    hidden = 4 * 32
    for (method, level), p in points.items():
        assert math.isfinite(p["loss"]) and 0 < p["loss"] < math.log(256) + 1
        if method == "percentile":
            # per token, floor(q (m - 1)) + 1 inputs fall below the percentile and ReLU zeroes them
            share = (math.floor(level * (hidden - 1)) + 1) / hidden
            assert p["neg_frac"] == pytest.approx(share, abs=1e-6)
            assert p["sparsity"] == pytest.approx(share, abs=1e-6)
            assert p["target"] == level
        elif method == "topk":  # exact Top-K keeps ceil(K m) GELU outputs per token
            assert p["sparsity"] == pytest.approx(1 - math.ceil(level * hidden) / hidden, abs=1e-6)
            assert p["target"] == pytest.approx(1 - level)
    # so the two methods give the same sparsity at one target up to 2 / m: by construction, a
    # test and not a claim (their negative shares are a claim)
    for target in (0.3, 0.7):
        pc = next(p for p in gpt["points"] if p["method"] == "percentile" and p["target"] == target)
        tk = next(p for p in gpt["points"] if p["method"] == "topk"
                  and p["target"] == pytest.approx(target))
        assert abs(pc["sparsity"] - tk["sparsity"]) <= 2 / hidden
    exact = [p for p in gpt["points"] if p["method"] != "topk-frozen"]
    inside = [p["loss"] for p in exact if 0.09 <= p["sparsity"] <= 0.79]
    assert gpt["flat_range_rise"] == pytest.approx(max(inside) - min(inside))
    assert gpt["flat_width"] == 0 or gpt["flat_from"] < gpt["flat_until"]
    best = min(p["loss"] for p in exact)
    if gpt["flat_from"] is not None:
        flat = [p for p in exact if gpt["flat_from"] - 1e-6 <= p["sparsity"] <= gpt["flat_until"] + 1e-6]
        assert flat and all(p["loss"] <= best + gpt["tolerance"] for p in flat)
    for pair in gpt["frozen_pairs"]:
        ref = points[("topk", pair["level"])]
        assert pair["difference"] == pytest.approx(points[("topk-frozen", pair["level"])]["loss"]
                                                   - ref["loss"])
    ids = {c.id for c in exp.claims(summary)}
    assert {"sparsity/gpt/loss-flat-11-to-77", "sparsity/gpt/methods-match-neg-frac",
            "sparsity/gpt-topk-frozen/matches-exact-topk"} <= ids
    assert "sparsity/gpt/methods-match-sparsity" not in ids
    assert (tmp_path / "figures" / "sparsity_gpt.png").exists()
    with pytest.raises(ConfigError, match="gpt_steps"):
        build_config(exp.Config, {"models": "gpt", "frozen_models": "gpt", "gpt_steps": 10,
                                  "topk_freeze_after": 10})


def test_sparse_activations_table_with_two_seeds(tmp_path):
    exp, summary = _run("sparse-activations", {"activations": "relu,gelu,noisy_relu",
                                               "setups": "mlp:none,mlp:rmsnorm", "steps": 15},
                        tmp_path, seeds=(0, 1))
    cell = summary["table"]["mlp:none"]["relu"]
    assert cell["seeds"] == 2 and cell["accuracy_sd"] is not None
    # ReLU's zeros are exactly its negative inputs; GELU makes (almost) no exact zeros
    assert cell["sparsity_mean"] == pytest.approx(cell["neg_frac_mean"], abs=1e-6)
    assert summary["table"]["mlp:none"]["gelu"]["sparsity_mean"] < 0.05
    # without a norm the linear output is the activation's input (App. D.1's quantity equals ours)
    assert cell["linear_neg_frac_mean"] == pytest.approx(cell["neg_frac_mean"], abs=1e-6)
    assert len(summary["table_text"]) == 2
    claims = exp.claims(summary)
    assert any("NoisyReLU" in c.claim for c in claims)
    with pytest.raises(ConfigError, match="setups"):
        build_config(exp.Config, {"setups": "mlp:layrnorm"})


def test_relufication_swaps_every_gelu(tmp_path):
    exp, summary = _run("relufication", {"models": "mlp,mlp-skip,resnet,vit", "steps": 12},
                        tmp_path)
    for model, e in summary["models"].items():
        assert e["before_sparsity"] < 0.05, model  # GELU: no exact zeros
        # after the swap (and after fine-tuning) ReLU's zeros are exactly its negative inputs:
        # true by construction, so a test and not a claim of the experiment
        assert e["swapped_sparsity"] == pytest.approx(e["swapped_neg_frac"], abs=1e-6), model
        assert e["after_sparsity"] == pytest.approx(e["after_neg_frac"], abs=1e-6), model
        assert e["swapped_sparsity"] > 0.2, model
        assert "accuracy_drop_pp" in e
    claims = {c.id: c for c in exp.claims(summary)}
    assert not any("matches-negative-share" in cid for cid in claims)
    change = claims["relufication/mlp/negative-share-changes-little"]
    e = summary["models"]["mlp"]
    assert change.check["reference"] == e["before_neg_frac"]
    assert change.check["value"] == e["after_neg_frac"] and change.check["bound"] == 0.05
    assert change.held == (abs(e["after_neg_frac"] - e["before_neg_frac"]) <= 0.05)


def test_accumulation_stop_freezes_and_reports_ratios(tmp_path):
    exp, summary = _run("accumulation-stop", {"models": "mlp", "steps": 40, "warmup": 10}, tmp_path)
    entry = summary["models"]["mlp"]
    assert set(entry) == {"layernorm", "batchnorm", "percentile", "percentile-frozen"}
    assert entry["layernorm"]["ratio_to_layernorm"] == 1.0
    # statistics were computed during warm-up only (10 steps), every step when dynamic
    assert entry["percentile-frozen"]["stat_computations"] == 10
    assert entry["percentile"]["stat_computations"] == 41  # 40 steps + 1 evaluation pass
    # the drift of Fig. 12: same initial weights per seed, so the shifts differ only by training
    assert all(math.isfinite(e["weight_mean_shift"]) for e in entry.values())
    # where the pre-activations sit against the centre: dynamic percentiles re-centre at q = 0.5
    assert all(0 <= e["centred_negative_share"] <= 1 and math.isfinite(e["norm_input_mean_shift"])
               for e in entry.values())
    claims = {c.id: c for c in exp.claims(summary)}
    assert len(claims) == 4
    drift = claims["accumulation-stop/mlp/frozen-keeps-drift"]
    frozen, dynamic = (entry[k]["weight_mean_shift"] for k in ("percentile-frozen", "percentile"))
    assert drift.reference == pytest.approx(dynamic) and drift.value == pytest.approx(frozen)
    assert drift.threshold == pytest.approx(0.25 * abs(dynamic))
    with pytest.raises(ConfigError, match="warmup"):
        build_config(exp.Config, {"warmup": 500, "steps": 100})


def test_post_activation_linears_are_the_layers_reading_an_activation():
    import torch

    from actlab.data.digits import load_digits
    from actlab.experiments.accumulation_stop.drift import mean_weight, post_activation_linears
    from actlab.nn.classifiers import build_classifier

    data = load_digits()
    mlp = build_classifier("mlp", data, "relu", pre_norm="layernorm")
    found = post_activation_linears(mlp, data.x_test[:4])
    # Linear -> Norm -> Act blocks: every block after the input projection, and the head
    assert found == [b.linear for b in mlp.blocks] + [mlp.head]
    expected = torch.stack([m.weight.mean() for m in found]).mean()
    assert mean_weight(found) == pytest.approx(float(expected))
    assert math.isnan(mean_weight([]))


def test_norm_statistics_read_each_norms_input_mean_and_negative_output_share():
    import torch
    from torch import nn

    from actlab.experiments.accumulation_stop.drift import norm_statistics

    torch.manual_seed(0)
    first, second = nn.Linear(6, 5), nn.Linear(5, 5)
    norm1, norm2 = nn.BatchNorm1d(5), nn.LayerNorm(5)
    norm1.running_mean.fill_(0.3)  # eval mode must use this, and not update it
    before = norm1.num_batches_tracked.clone()
    model = nn.Sequential(first, norm1, nn.ReLU(), second, norm2, nn.ReLU()).train()
    x = torch.randn(32, 6)
    with torch.no_grad():  # the dense forward pass in eval mode, by hand
        p1 = first(x)
        o1 = (p1 - 0.3) / torch.sqrt(torch.tensor(1.0 + norm1.eps))
        p2 = second(o1.clamp_min(0))
        o2 = nn.functional.layer_norm(p2, (5,), norm2.weight, norm2.bias, norm2.eps)
    mean, negative = norm_statistics(model, x)
    assert mean == pytest.approx(float((p1.mean() + p2.mean()) / 2))
    assert negative == pytest.approx(float(((o1 < 0).float().mean() + (o2 < 0).float().mean()) / 2))
    assert model.training and float(norm1.running_mean[0]) == pytest.approx(0.3)
    assert norm1.num_batches_tracked == before
    assert all(math.isnan(v) for v in norm_statistics(nn.Sequential(nn.Linear(6, 2)), x))


def test_experiments_read_cifar_when_pointed_to_it(tmp_path):
    import pickle

    import numpy as np

    rng = np.random.default_rng(0)
    folder = tmp_path / "cifar"
    folder.mkdir()
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        with open(folder / name, "wb") as fh:
            pickle.dump({b"data": rng.integers(0, 256, (8, 3072), dtype=np.uint8),
                         b"labels": rng.integers(0, 10, 8).tolist()}, fh)
    exp, summary = _run("relufication", {"models": "vit", "steps": 3, "cifar_dir": str(folder)},
                        tmp_path / "run")
    assert summary["scale"]["data"] == "cifar10" and "vit" in summary["models"]
    with pytest.raises(ConfigError, match="cifar_dir"):
        build_config(exp.Config, {"cifar_dir": str(tmp_path / "missing")})


def test_linear_neg_frac_reads_the_linear_output_before_the_norm():
    import torch

    from actlab.data.digits import load_digits
    from actlab.experiments.sparse_activations.preact import linear_neg_frac, pre_activation_layers
    from actlab.nn.classifiers import build_classifier

    data = load_digits()
    model = build_classifier("mlp", data, "relu", pre_norm="layernorm", seed=0)
    layers = pre_activation_layers(model, data.x_test[:4])
    assert layers == [model.input.linear] + [b.linear for b in model.blocks]  # not the head
    with torch.no_grad():  # shift the first layer's output positive: LayerNorm re-centres it
        model.input.linear.weight.copy_(model.input.linear.weight.abs())
    x = data.x_test - data.x_test.min()  # non-negative inputs: every first-layer output >= 0
    expected = []
    h = x.flatten(1)
    with torch.no_grad():
        for block in [model.input, *model.blocks]:
            out = block.linear(h)
            expected.append(float((out < 0).float().mean()))
            h = block(h)
    assert expected[0] == 0.0
    assert linear_neg_frac(model, x) == pytest.approx(sum(expected) / len(expected))
    resnet = build_classifier("resnet", data, "relu")
    convs = pre_activation_layers(resnet, data.x_test[:4])
    assert convs and all(isinstance(c, torch.nn.Conv2d) for c in convs)



@pytest.mark.parametrize("linear", [True, False])
def test_negative_share_claim_names_the_reading_it_judged(linear):
    """Table 1's negative-share claim says whether it read App. D.1's linear outputs or, for a
    run from before that reading, the activation's inputs; the values it judges are the ones
    of that reading."""
    from actlab.experiments.sparse_activations.claims import claims

    def cell(linear_share: float, input_share: float) -> dict:
        out = {"accuracy_mean": 0.9, "neg_frac_mean": input_share}
        if linear:
            out["linear_neg_frac_mean"] = linear_share
        return {"relu": out}

    table = {"mlp:none": cell(0.70, 0.40), "resnet:batchnorm": cell(0.50, 0.45)}
    claim = {c.id: c for c in claims({"table": table})}["sparse-activations/relu/negative-share-substantial"]
    if linear:
        assert "linear outputs (App. D.1): others mean 0.700, ResNet+BN 0.500" in claim.measured
        assert claim.held is True
    else:
        assert "activation inputs (the run predates" in claim.measured
        assert "others mean 0.400, ResNet+BN 0.450" in claim.measured
        assert claim.held is False
