"""``dit-shift`` and ``dit-percentile``: the shared DiT protocol, a real run of each through the
runner at a unit-test size, the papers' models walked on the ``meta`` device, the claims'
verdicts on pooled means (the runner judges them again on every seed's own
summary), and config errors naming their field."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from actlab.errors import ConfigError
from actlab.experiments.dit_common import paired, spread_numbers, within_spread
from actlab.experiments.dit_percentile import DiTPercentileConfig
from actlab.experiments.dit_percentile.claims import claims as percentile_claims
from actlab.experiments.dit_shift import DiTShiftConfig
from actlab.experiments.dit_shift.claims import claims as shift_claims
from actlab.recipes.dit_protocol import (
    DIT_S2_STEPS,
    PAPER_EMA,
    PAPER_STEPS,
    PAPER_WARMUP,
    detail_ratio,
    scaled_decay,
    scaled_warmup,
    step_rates,
)
from actlab.runner.config import build_config
from actlab.runner.driver import RunOptions, run_experiment
from actlab.runner.experiment import UnitContext, get_experiment
from actlab.train.placement import on_device

from _meta_harness import META, MetaReads

# A real run in a few seconds: the protocol's every part, at a size no claim is judged at.
TINY = {
    "hidden_size": 16,
    "depth": 2,
    "steps": 12,
    "log_points": 2,
    "eval_points": 1,
    "fid_samples": 20,
    "sample_steps": 3,
    "loss_samples": 32,
    "grid_per_class": 1,
    "batch_size": 16,
}


def test_scaling_gives_the_papers_values_at_their_lengths():
    assert scaled_decay(PAPER_EMA, PAPER_STEPS) == pytest.approx(0.9999, abs=1e-15)
    assert scaled_warmup(PAPER_STEPS) == 50_000 == PAPER_WARMUP
    # the same fraction of training at ours: 1/40 of DiT-B/2's 400,000 for the EMA window
    assert scaled_decay(PAPER_EMA, 4000) == pytest.approx(1 - 1 / 100)
    assert scaled_decay(PAPER_EMA, 20) == 0.0  # no negative decay on very short runs
    # dit-percentile takes its fractions from DiT-S/2's 300K: warm-up 1/6, EMA window 1/30
    assert DIT_S2_STEPS == 300_000
    config = DiTPercentileConfig(steps=3000)
    assert config.warmup == 500 and config.momentum == pytest.approx(0.01)
    assert config.ema_decay == pytest.approx(1 - 1 / 100)
    # at the paper's lengths the paper's values: T_warm and the statistics' EMA 5 / 50,000
    s2 = DiTPercentileConfig(steps=DIT_S2_STEPS)
    assert s2.warmup == PAPER_WARMUP and s2.momentum == pytest.approx(1 - 0.9999)
    assert s2.ema_decay == pytest.approx(PAPER_EMA, abs=1e-15)
    assert DiTShiftConfig(steps=PAPER_STEPS).ema_decay == pytest.approx(PAPER_EMA, abs=1e-15)


def test_condition_specs():
    config = DiTPercentileConfig(steps=600)  # warm-up 600 / 6 = 100 steps
    assert config.norm_spec("layernorm") == "layernorm"
    assert config.norm_spec("percentile") == "percentile-layernorm:q=0.5:momentum=0.05"
    assert config.norm_spec("percentile-frozen").endswith(":freeze_after=100")
    assert config.activation_spec("relu") == "relu"
    assert config.activation_spec("gelu-topk-0.05") == "gelu:topk=0.05"
    channel = DiTPercentileConfig(percentile_stats="channel")
    assert channel.norm_spec("percentile").startswith("percentile-batchnorm:")


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"model": "DiT-Q/2"}, "model"),
        ({"model": "DiT-B/2"}, "data"),  # the paper's model needs latents
        ({"fid_samples": 25}, "fid_samples"),
        ({"data": "pixels"}, "data"),
        ({"patch_size": 3}, "patch_size"),
        ({"num_heads": 3}, "num_heads"),
        ({"data": "latents:/no/such/folder"}, "data"),  # refused before any unit runs
    ],
)
def test_config_errors_name_their_field(overrides, field):
    with pytest.raises(ConfigError) as err:
        build_config(DiTShiftConfig, overrides)
    assert err.value.field == field


def test_a_latent_folder_without_shards_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="no .npy or .safetensors") as err:
        build_config(DiTShiftConfig, {"data": f"latents:{tmp_path}"})
    assert err.value.field == "data"


def test_topk_levels_and_tolerance_are_checked():
    with pytest.raises(ConfigError) as err:
        build_config(DiTPercentileConfig, {"topk_levels": [0.1, 1.5]})
    assert err.value.field == "topk_levels"
    with pytest.raises(ConfigError) as err:
        build_config(DiTPercentileConfig, {"percentile_stats": "row"})
    assert err.value.field == "percentile_stats"
    with pytest.raises(ConfigError) as err:
        build_config(DiTPercentileConfig, {"topk_options": "tilt=3"})
    assert err.value.field == "topk_options"
    config = build_config(DiTPercentileConfig, {"topk_options": "clip=4"})
    assert config.activation_spec("gelu-topk-0.05") == "gelu:topk=0.05:clip=4"


def test_detail_ratio_scores_blur_below_one():
    g = torch.Generator().manual_seed(0)
    images = torch.rand(20, 1, 8, 8, generator=g) * 2 - 1
    assert detail_ratio(images, images) == pytest.approx(1.0)
    kernel = torch.full((1, 1, 3, 3), 1 / 9)
    blurred = torch.nn.functional.conv2d(images, kernel, padding=1)
    assert detail_ratio(blurred, images) < 0.5
    assert detail_ratio(torch.zeros_like(images), images) == 0.0


def test_step_rates_leave_out_evaluated_steps():
    intervals = np.full(40, 0.01)
    intervals[[4, 19]] = 5.0  # steps 5 and 20 were followed by an evaluation
    rates = step_rates(intervals, skip={5, 20}, warmup=10)
    assert rates["steps_per_s_warmup"] == pytest.approx(100.0)
    assert rates["steps_per_s"] == pytest.approx(100.0)
    assert rates["steps_per_s_noise"] == pytest.approx(0.0)
    assert step_rates(intervals, skip=set(), warmup=10)["steps_per_s_warmup"] < 100.0


def _frame(means, sds, n=3):
    return pd.DataFrame({"mean": means, "sd": sds, "n": n}, index=range(1, len(means) + 1))


def test_spread_numbers_decide_only_beyond_the_spread():
    lower = spread_numbers(_frame([-2.0, -3.0], [0.5, 0.5]))
    assert lower["high"] == pytest.approx(-1.5) and within_spread(lower) == ""
    mixed = spread_numbers(_frame([-2.0, 0.2], [0.5, 0.5]))
    assert within_spread(mixed) == "within the seed spread" and mixed["worst_step"] == 2
    higher = spread_numbers(_frame([-2.0, 1.0], [0.5, 0.5]))
    assert higher["low"] == pytest.approx(0.5) and within_spread(higher) == ""
    assert within_spread(spread_numbers(_frame([-2.0], [math.nan], n=1))).startswith("fewer")
    # a margin per checkpoint: 2% of a loss of 1.0 leaves a residual of 0.01 comparable
    margin = pd.Series([0.02, 0.02], index=[1, 2])
    assert spread_numbers(_frame([0.01, 0.0], [0.005, 0.005]), margin=margin)["high"] < 0


def test_paired_differences_are_per_seed():
    rows = [
        (run, seed, step, "", "fid", value)
        for run, offset in (("dit/unshifted", 0.0), ("dit/shifted", -1.0))
        for seed in (0, 1, 2)
        for step, value in ((10, 5.0 + seed + offset), (20, 4.0 + 2 * seed + offset))
    ]
    table = pd.DataFrame(rows, columns=["run", "seed", "step", "layer", "metric", "value"])
    diff = paired(table, "dit/shifted", "dit/unshifted", "fid")
    assert diff["mean"].tolist() == [-1.0, -1.0] and diff["sd"].tolist() == [0.0, 0.0]


def _verdicts(claims) -> dict[str, bool | None]:
    return {c.id.split("/", 1)[1]: c.held for c in claims}


def test_shift_claims_judge_every_checkpoint_end_first():
    # pooled means of the paired residuals; the keys as they come back from JSON (strings)
    summary = {
        "loss_tolerance": 0.02,
        "train_loss_excess": {"10": -0.02, "100": -0.01, "50": -0.03},
        "fid_residual": {"50": -1.0, "100": 0.5},
        "overshoot": {"difference": -0.1, "shifted": 0.2, "unshifted": 0.3, "block": "block1"},
    }
    claims = shift_claims(summary)
    assert _verdicts(claims) == {
        "shifted/train-loss-comparable-or-lower": True,
        "shifted/lower-fid-every-checkpoint": False,  # the last checkpoint is not lower
        "shifted/smaller-hidden-state-overshoot": True,
    }
    loss = claims[0]
    # an all-of over the checkpoints, the end (step 100) first: the claim's main number
    assert loss.comparison == "all-of" and loss.value == -0.01
    assert [part["value"] for part in loss.check["parts"]] == [-0.01, -0.02, -0.03]
    assert "step 100" in loss.measured and "largest -0.01 at step 100" in loss.measured
    assert all(c.held is None for c in shift_claims({}))


def test_percentile_claims_quote_the_paper_and_are_one_sided_against_a_margin():
    summary = {
        "freeze_tolerance": 0.1,
        # relative differences, LayerNorm-worse sign convention: 0.05 is 5 % worse
        "fid_vs_layernorm": {"mean": 0.05, "sd": 0.01, "seeds": 2},
        "is_vs_layernorm": {"mean": 0.15, "sd": 0.01, "seeds": 2},
        "frozen_fid_vs_layernorm": {"mean": 0.2, "sd": 0.01, "seeds": 2},
        "speed": {"warmup": {"ratio": 0.7, "noise": 0.02}, "after": {"ratio": 1.01, "noise": 0.05}},
        "detail_vs_relu": {"per_k": {"gelu-topk-0.1": -0.1, "gelu-topk-0.05": 0.02},
                           "relu": 0.8, "topk": 0.9},
    }
    claims = percentile_claims(summary)
    assert _verdicts(claims) == {
        "percentile/fid-no-worse-than-layernorm": True,  # 5 % worse, inside the 10 % margin
        "percentile/is-no-worse-than-layernorm": False,  # 15 % worse
        "percentile-frozen/quality-close-to-layernorm": False,
        "percentile-frozen/slower-during-warmup": True,
        "percentile-frozen/layernorm-speed-after-freezing": True,
        "gelu-topk/sharper-detail-than-relu": False,  # not at K = 0.05
    }
    fid = next(c for c in claims if c.id.endswith("fid-no-worse-than-layernorm"))
    assert "48.21" in fid.claim and "49.4" in fid.claim and "ours" in fid.claim
    assert fid.threshold == 0.1 and fid.post_hoc
    detail = claims[-1]
    # the Top-K levels in increasing K whatever order the summary lists them in
    assert [part["value"] for part in detail.check["parts"]] == [0.02, -0.1]


@pytest.mark.parametrize("name, n_units", [("dit-shift", 2), ("dit-percentile", 5)])
def test_a_real_run_through_the_runner(name, n_units, tmp_path):
    overrides = dict(TINY)
    if name == "dit-percentile":
        overrides["topk_levels"] = [0.1]
    outcome = run_experiment(
        name,
        "quick",
        overrides=overrides,
        n_seeds=1,
        options=RunOptions(out=tmp_path, progress=False),
    )
    assert outcome.ok and outcome.n_units == n_units, (outcome.failed, outcome.summary_error)
    table = pd.read_csv(outcome.path / "metrics.csv")
    metrics = set(table["metric"])
    assert {
        "batch_loss",
        "train_loss",
        "hidden_mean",
        "act_mean",
        "fid_digits-classifier",
        "is_digits-classifier",
        "detail_ratio",
    } <= metrics
    fid = table[table["metric"] == "fid_digits-classifier"]
    assert len(fid) == n_units and fid["value"].gt(0).all()  # one checkpoint each
    assert {"samples.png", "fid.png", "loss_residuals.png", "hidden_means.png"} <= {
        p.name for p in (outcome.path / "figures").iterdir()
    }
    # one seed: every claim compares trained models, so each is undecided, never by chance
    assert outcome.claims and all(c["held"] is None for c in outcome.claims)
    if name == "dit-percentile":
        assert metrics >= {"steps_per_s", "steps_per_s_warmup"}


@pytest.mark.parametrize("name", ["dit-shift", "dit-percentile"])
@pytest.mark.slow
def test_every_seed_is_summarised_and_every_claim_judged_on_its_sample(name, tmp_path):
    import json

    overrides = dict(TINY)
    if name == "dit-percentile":
        overrides["topk_levels"] = [0.1, 0.05]
    outcome = run_experiment(name, "quick", overrides=overrides, n_seeds=2,
                             options=RunOptions(out=tmp_path, progress=False))
    assert outcome.ok, (outcome.failed, outcome.summary_error)
    seeds = json.loads((outcome.path / "seed_summaries.json").read_text())
    assert seeds["seeds"] == [0, 1] and not seeds["error"] and len(seeds["summaries"]) == 2
    for claim in outcome.claims:  # each judged on both seeds' own values
        assert claim["n"] == 2, claim
        assert "not computed on single seeds" not in claim["reason"], claim


def test_channel_statistics_train_and_freeze(tmp_path):
    # D.1's "channel-wise and averaged over the batch" flavour: Percentile BatchNorm over all
    # tokens, frozen by Accumulation Stop after the scaled warm-up
    from actlab.nn.norms import norm_modules
    from actlab.recipes.dit_protocol import build_model, load_data, train_condition
    from actlab.runner.experiment import UnitResult

    config = build_config(DiTPercentileConfig, {**TINY, "percentile_stats": "channel"})
    result = UnitResult()
    spec = config.norm_spec("percentile-frozen")
    assert spec.startswith("percentile-batchnorm:") and spec.endswith(
        f"freeze_after={config.warmup}"
    )
    status = train_condition(
        config,
        result,
        "dit/percentile-frozen",
        0,
        activation="gelu",
        norm=spec,
        bias=False,
        timed=True,
    )
    assert status == "ok"
    assert {"fid_digits-classifier", "steps_per_s"} <= {row[4] for row in result.rows}
    model = build_model(config, load_data(config, 0), activation="gelu", norm=spec, seed=0)
    norms = norm_modules(model)
    assert norms and all(n.freeze_after == config.warmup for n in norms)


def _latents(tmp_path: Path) -> str:
    from actlab.data.latents import write_latent_shard

    g = torch.Generator().manual_seed(0)
    write_latent_shard(
        tmp_path / "shard0.safetensors",
        torch.randn(8, 4, 32, 32, generator=g),
        torch.tensor([0, 1, 2, 3, 4, 5, 6, 999]),
    )
    return f"latents:{tmp_path}"


@pytest.mark.parametrize(
    "name, model, depth, hidden",
    [("dit-shift", "DiT-B/2", 12, 768), ("dit-percentile", "DiT-S/2", 12, 384)],
)
@pytest.mark.slow
def test_the_papers_models_walk_on_meta(name, model, depth, hidden, tmp_path):
    experiment = get_experiment(name)
    overrides = {
        "model": model,
        "data": _latents(tmp_path),
        "steps": 2,
        "log_points": 2,
        "eval_points": 1,
        "loss_samples": 4,
        "batch_size": 4,
    }
    config = build_config(experiment.Config, overrides)
    units = experiment.units(config)
    mode = MetaReads()
    for unit in units[:2]:  # the baseline and the first changed condition
        with mode, on_device(META):
            result = experiment.run_unit(
                config, dict(unit), [0], UnitContext(workdir=tmp_path, device=META)
            )
        assert result.status == "ok", result.error
        layers = {row[3] for row in result.rows if row[4] == "hidden_mean"}
        assert layers == {f"block{i}" for i in range(depth)}
    assert mode.heavy["meta"] > 0 and not mode.heavy_on_cpu, mode.heavy_on_cpu.most_common(3)
    assert not mode.generator_mismatches, mode.generator_mismatches[:3]
    from actlab.nn.dit import dit_config

    assert dit_config(model).hidden_size == hidden
