"""The spikes experiment's norm and depth arms: their units, the per-arm summary read from a
hand-built table, and the claims those numbers decide (Fig. 6, the spike's block, GELU² vs
ReLU², Tables 7-8 at depth)."""

from __future__ import annotations

import pandas as pd
import pytest

from actlab.errors import ConfigError
from actlab.experiments.spikes import ACTIVATIONS, SpikesConfig, SpikesExperiment, arms
from actlab.experiments.spikes.summary import build_summary
from actlab.runner.driver import RunOptions, run_experiment

from _corpus import write_code_folder

FAST = {"compile_model": "off"}


def test_default_units_are_the_activations_alone() -> None:
    # the default run is the one before the arms existed: same units, so the same unit ids
    config = SpikesConfig(**FAST)
    assert SpikesExperiment().units(config) == [{"activation": a} for a in ACTIVATIONS]


def test_arm_units_reuse_the_base_run_and_name_their_rows() -> None:
    config = SpikesConfig(**FAST, activations=["relu", "relu2"],
                          norms=["rmsnorm", "percentile-layernorm:q=0.5"],
                          norm_activations=["relu2", "gelu2"], depth_layers=12, depth_width=64,
                          depth_activations=["relu2"])
    units = SpikesExperiment().units(config)
    assert units == [
        {"activation": "relu"}, {"activation": "relu2"},
        # layernorm (the config's norm) with relu2 is the base run: not trained twice
        {"activation": "gelu2", "norm": "layernorm"},
        {"activation": "relu2", "norm": "rmsnorm"}, {"activation": "gelu2", "norm": "rmsnorm"},
        {"activation": "relu2", "norm": "percentile-layernorm:q=0.5"},
        {"activation": "gelu2", "norm": "percentile-layernorm:q=0.5"},
        {"activation": "relu2", "n_layer": 12, "n_embd": 64}]
    assert [arms.run_name(config, u) for u in units] == [
        "relu", "relu2", "layernorm/gelu2", "rmsnorm/relu2", "rmsnorm/gelu2",
        "percentile-layernorm:q=0.5/relu2", "percentile-layernorm:q=0.5/gelu2", "12x64/relu2"]
    deep = arms.unit_scale(config, units[-1]).model_config(activation="relu2")
    assert (deep.n_layer, deep.n_embd, deep.norm) == (12, 64, "layernorm")
    assert arms.unit_scale(config, units[3]).model_config().norm == "rmsnorm"


def test_bad_arm_fields_are_refused() -> None:
    with pytest.raises((ConfigError, ValueError), match="rmsnrom|rmsnorm"):
        SpikesConfig(**FAST, norms=["rmsnrom"])
    with pytest.raises(ConfigError, match="depth_width"):
        SpikesConfig(**FAST, depth_layers=12, depth_width=66)  # 4 heads
    with pytest.raises(ConfigError, match="depth_layers"):
        SpikesConfig(**FAST, model="gpt-nano", depth_layers=12)  # the preset's 12 x 768


def _rows(run: str, seed: int, ranges: list[float], up: list[tuple[float, float]],
          loss: float) -> list[dict]:
    rows = [{"run": run, "seed": seed, "step": 10, "layer": "", "metric": "val_loss",
             "value": loss}]
    for i, (r, (lo, hi)) in enumerate(zip(ranges, up)):
        layer = str(i)
        rows += [{"run": run, "seed": seed, "step": 10, "layer": layer, "metric": m, "value": v}
                 for m, v in (("act_range", r), ("act_max", r), ("act_min", 0.0),
                              ("up_in_max", hi), ("up_in_min", lo))]
    return rows


def test_arm_summary_reads_each_seeds_spike_block_and_ranges() -> None:
    config = SpikesConfig(**FAST, activations=["relu2"], norms=["rmsnorm"],
                          norm_activations=["relu2"], depth_layers=6, depth_width=64,
                          depth_activations=["relu2"])
    table = pd.DataFrame(
        _rows("relu2", 0, [1.0, 9.0, 2.0], [(-1, 1)] * 3, 3.0)
        + _rows("relu2", 1, [1.0, 2.0, 7.0], [(-2, 1), (-1, 1), (-1, 1)], 3.2)
        + _rows("rmsnorm/relu2", 0, [20.0, 2.0, 2.0], [(-3, 3)] * 3, 3.1)
        + _rows("12x64/relu2", 0, [1.0] * 6, [(-1, 1)] * 6, 9.0)  # not this config's arm
        + _rows("6x64/relu2", 0, [1.0, 1.0, 1.0, 1.0, 5.0, 1.0], [(-1, 1)] * 6, 3.3))
    summary = build_summary(config, table, [])
    base = summary["activations"]["relu2"]
    # per seed: the block with the largest range (0-based) and the largest up-input max - min
    assert base["spike_block_per_seed"] == {"0": 1.0, "1": 2.0}
    assert base["spike_block"] == pytest.approx(1.5)
    assert base["largest_range_mean"] == pytest.approx(8.0)
    assert base["up_in_range_per_seed"] == {"0": 2.0, "1": 3.0}
    assert summary["norms"]["arms"]["layernorm"]["relu2"] is not None
    assert summary["norms"]["arms"]["layernorm"]["relu2"]["largest_range_mean"] == 8.0
    assert summary["norms"]["arms"]["rmsnorm"]["relu2"]["largest_range_mean"] == 20.0
    depth = summary["depth"]
    assert depth["activations"]["relu2"]["spike_block"] == 4.0
    assert depth["activations"]["relu2"]["val_loss"]["mean"] == 3.3
    # the base's spike-layer statistics read the base runs only
    assert summary["spike_layers"] == {"runs": 0}  # no weight rows in this table


def _arm(range_: float, up: float, block: float, loss: float = 3.0) -> dict:
    return {"largest_range_mean": range_, "largest_range": range_, "up_in_range_mean": up,
            "spike_block": block, "val_loss": {"mean": loss, "sd": 0.0},
            "largest_range_per_seed": {"0": range_}}


def test_norm_claims_compare_each_centring_norm_with_rmsnorm() -> None:
    norms = {"base": "layernorm", "arms": {
        "layernorm": {"relu2": _arm(10.0, 5.0, 0)},
        "rmsnorm": {"relu2": _arm(30.0, 4.0, 0, 3.3), "gelu2": _arm(20.0, 4.0, 0, 3.2)},
        "percentile-layernorm:q=0.5": {"relu2": _arm(40.0, 3.0, 0)}}}
    held = {c.id: c.held for c in SpikesExperiment().claims({"activations": {}, "norms": norms})}
    assert held == {
        "spikes/layernorm-relu2/spike-range-below-rmsnorm": True,
        "spikes/layernorm-relu2/up-input-range-below-rmsnorm": False,
        "spikes/rmsnorm-gelu2/lower-spikes-than-relu2": True,
        "spikes/rmsnorm-gelu2/loss-below-relu2": True,
        "spikes/percentile-layernorm-q-0.5-relu2/spike-range-below-rmsnorm": False,
        "spikes/percentile-layernorm-q-0.5-relu2/up-input-range-below-rmsnorm": True}
    # without an RMSNorm arm there is nothing to compare with
    del norms["arms"]["rmsnorm"]
    assert not SpikesExperiment().claims({"activations": {}, "norms": norms})


def test_depth_claims_judge_the_spike_block_against_the_first_third() -> None:
    summary = {"activations": {"relu2": _arm(70.0, 5.0, 3.0)},  # the last of 4 blocks
               "depth": {"n_layer": 12, "n_embd": 64, "base_n_layer": 4, "spike_layers": {},
                         "activations": {"relu2": _arm(50.0, 5.0, 3.0, 3.1),  # block 4 of 12
                                         "gelu2": _arm(60.0, 5.0, 4.0, 3.0)}}}  # block 5
    claims = {c.id: c for c in SpikesExperiment().claims(summary)}
    assert claims["spikes/12-layers-relu2/spike-in-first-third"].held is True
    assert claims["spikes/12-layers-gelu2/spike-in-first-third"].held is False
    assert claims["spikes/4-layers-relu2/spike-in-first-third"].held is False
    assert "spikes/4-layers-gelu2/spike-in-first-third" not in claims  # no base gelu2 run
    assert claims["spikes/12-layers-gelu2/lower-spikes-than-relu2"].held is False
    assert claims["spikes/12-layers-gelu2/loss-below-relu2"].held is True
    assert claims["spikes/12-layers-gelu2/loss-below-relu2"].quoted == {
        "gelu2_paper": 3.233, "relu2_paper": 3.251}


@pytest.mark.slow
def test_arms_toy_run_judges_their_claims_over_seeds(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("ACTLAB_CACHE", str(tmp_path / "cache"))
    folder = write_code_folder(tmp_path / "text", files=12, repeats=40)
    toy = {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 16, "batch_size": 4,
           "steps": 4, "warmup": 1, "eval_every": 2, "eval_batches": 1, "log_every": 2,
           "data": str(folder), "activations": "relu2", "probe_batches": 1,
           "norms": "rmsnorm", "norm_activations": "relu2", "depth_layers": 3,
           "depth_width": 8, "depth_activations": "relu2"}
    outcome = run_experiment("spikes", "default", toy, n_seeds=2,
                             options=RunOptions(out=tmp_path, progress=False))
    assert outcome.ok, outcome.failure_lines()
    assert outcome.summary["depth"]["activations"]["relu2"]["n_layer"] == 3
    claims = {c["id"]: c for c in outcome.claims}
    for cid in ("spikes/layernorm-relu2/spike-range-below-rmsnorm",
                "spikes/3-layers-relu2/spike-in-first-third",
                "spikes/1-layers-relu2/spike-in-first-third",
                "spikes/3-layers-spike-layers/lower-weight-std"):
        assert claims[cid]["n"] == 2, claims[cid]  # judged on both seeds' own values
