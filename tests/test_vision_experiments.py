"""bias-component and vit-shift at a tiny scale: summary keys, pairing, CIFAR option, errors."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from actlab.errors import ConfigError
from actlab.runner.config import build_config
from actlab.runner.driver import RunOptions, run_experiment
from actlab.runner.experiment import (
    Claim,
    get_experiment,
)

from _inline_run import run_inline

AE_TINY = {"widths": [4, 8], "steps": 12, "batch_size": 16, "log_points": 6, "n_eval": 16,
           "n_show": 2, "grid_points": 3, "loss_every": 2, "min_fit": 1.0}
VIT_TINY = {"dim": 16, "depth": 2, "heads": 2, "steps": 8, "batch_size": 32, "log_points": 5,
            "loss_every": 2}


pytestmark = pytest.mark.usefixtures("one_thread")


def _run(name: str, overrides: dict, seeds: list[int], tmp_path):
    exp = get_experiment(name)
    config = build_config(exp.Config, overrides)
    summary, table, results = run_inline(exp, config, tmp_path, (seeds,))
    json.loads(json.dumps(summary, allow_nan=False))  # strict JSON, no NaN
    return exp, summary, results, table


@pytest.mark.slow
def test_bias_component_writes_summary_figures_and_claims(tmp_path):
    outcome = run_experiment("bias-component", "default", AE_TINY, n_seeds=1,
                             options=RunOptions(out=tmp_path, progress=False))
    assert not outcome.failed
    summary = json.loads((outcome.path / "summary.json").read_text())
    assert summary["data"] == "digits"
    for cond in ("unshifted", "shifted"):
        entry = summary[cond]
        for key in ("similarity_peak_step", "similarity_peak", "similarity_final"):
            assert key in entry
        assert entry["similarity_peak"] >= entry["similarity_final"] - 1e-12
        assert -1 <= entry["similarity_peak"] <= 1
        assert 0 < entry["similarity_peak_step"] <= AE_TINY["steps"]
        assert math.isfinite(summary[f"final_loss_{cond}"]) and summary[f"final_loss_{cond}"] > 0
    # the models differ (different activations from the same start)
    losses = [summary[f"final_loss_{c}"] for c in ("unshifted", "shifted", "shifted-theory")]
    assert len(set(losses)) == 3
    # shifted measures one b per ReLU at init; shifted-theory keeps 0.23; unshifted 0
    measured = summary["shifted"]["shifts"]
    assert len(measured) == 6 and len(set(measured.values())) == 6  # 2 stages x 2 convs + 2
    assert all(0 < b < 0.4 for b in measured.values())
    assert summary["shifted-theory"]["shifts"] == pytest.approx(dict.fromkeys(measured, 0.2303),
                                                                abs=1e-4)
    assert set(summary["unshifted"]["shifts"].values()) == {0.0}
    assert summary["loss_residual_final_theory"] is not None
    figures = {p.name for p in (outcome.path / "figures").iterdir()}
    assert {"similarity.png", "fig17_loss_residual.png", "fig5_grid_unshifted.png",
            "fig5_grid_shifted.png", "fig5_grid_shifted-theory.png"} <= figures
    claims = outcome.claims
    # one seed: every claim compares runs that vary with the seed, so it is undecided
    assert len(claims) == 4 and all(c["held"] is None and c["n"] == 1 for c in claims)
    assert all(c["reason"].startswith("too few seeds") for c in claims)
    # the note reads the checks on the seed means (here the one seed), in three words
    pooled = get_experiment("bias-component").claims(summary)
    assert [c.id for c in pooled] == [c["id"] for c in claims]
    words = {True: "shown by", False: "NOT shown by", None: "undecided"}
    assert all(n.startswith(words[c.held]) for n, c in zip(summary["note"], pooled, strict=True))


@pytest.mark.slow
def test_bias_component_measurements_are_consistent_and_deterministic(tmp_path):
    exp, summary, results, table = _run("bias-component", AE_TINY, [3], tmp_path)
    again = _run("bias-component", AE_TINY, [3], tmp_path / "again")[3]
    pd.testing.assert_frame_equal(table, again)  # same command, same numbers
    u = table[(table.run == "ae/unshifted") & (table.metric == "bias_share")]
    s = table[(table.run == "ae/shifted") & (table.metric == "bias_share")]
    assert ((u.value >= 0) & (u.value <= 1)).all() and ((s.value >= 0) & (s.value <= 1)).all()
    # unshifted ReLU latents are all >= 0, so their channel mean carries energy; the shift
    # measured at init removes most of it at step 0
    u0 = float(u[u.step == 0].value.iloc[0])
    s0 = float(s[s.step == 0].value.iloc[0])
    assert u0 > 0.1 and s0 < u0
    # the landmarks are read off the seed-mean similarity curve
    sim = table[(table.run == "ae/unshifted") & (table.metric == "bias_correlation")]
    peak = summary["unshifted"]["similarity_peak"]
    trained = sim[sim.step > 0]
    assert abs(peak - trained.value.max()) < 1e-12  # min_fit=1: every trained step counts
    assert summary["unshifted"]["similarity_peak_step"] == int(
        trained.step.iloc[int(np.argmax(trained.value.to_numpy()))])
    images = results[0]["data"]["3"]
    assert len(images["steps"]) >= 2 and np.asarray(images["full"]).shape[1:] == (2, 1, 16, 16)
    claims = exp.claims(summary)
    assert all(isinstance(c, Claim) for c in claims)


def test_bias_component_on_fake_cifar_directory(tmp_path):
    from test_data_files import _write_fake_cifar  # the CIFAR loader's own test helper

    _write_fake_cifar(tmp_path / "cifar" / "cifar-10-batches-py", 8, np.random.default_rng(0))
    overrides = {**AE_TINY, "steps": 4, "data_dir": str(tmp_path / "cifar"), "n_eval": 4}
    exp, summary, results, table = _run("bias-component", overrides, [0], tmp_path)
    assert summary["data"] == "cifar10" and summary["scale"]["image_size"] == 32
    images = results[0]["data"]["0"]
    assert np.asarray(images["input"]).shape == (2, 3, 32, 32)
    assert np.asarray(images["bias"]).shape[1:] == (2, 3, 32, 32)
    assert table[table.metric == "test_loss"].value.notna().all()
    with pytest.raises(ConfigError) as info:
        build_config(exp.Config, {"data_dir": str(tmp_path / "nowhere")})
    assert info.value.field == "data_dir"


def test_vit_shift_summary_keys_and_adaptive_centering(tmp_path):
    exp, summary, results, table = _run("vit-shift", VIT_TINY, [0, 1], tmp_path)
    for key in ("test_acc_unshifted", "test_acc_shifted", "test_loss_residual_final",
                "train_loss_residual_final", "overshoot_unshifted", "overshoot_shifted"):
        assert summary[key] is not None and math.isfinite(summary[key]), key
    assert 0 <= summary["test_acc_shifted"] <= 1
    # the residual is the paired difference of the two final test losses
    final = {c: table[(table.run == f"vit/{c}") & (table.metric == "test_loss") &
                      (table.step == VIT_TINY["steps"])].set_index("seed").value
             for c in ("unshifted", "shifted")}
    assert abs(summary["test_loss_residual_final"] -
               float((final["shifted"] - final["unshifted"]).mean())) < 1e-12
    # gelu:adaptive centres every MLP's output over its neurons; plain gelu is biased > 0
    act = table[table.metric == "act_mean"]
    assert act[act.run == "vit/shifted"].value.abs().max() < 1e-5
    assert act[act.run == "vit/unshifted"].value.min() > 0.01
    hidden = table[table.metric == "hidden_mean"]
    assert set(hidden.layer) == {"block0", "block1"}
    assert set(hidden.step) == set(table[table.metric == "test_loss"].step)
    figures = {p.name for p in (tmp_path / "figures").iterdir()}
    assert {"fig6_residuals.png", "fig7a_hidden_mean.png"} <= figures
    claims = exp.claims(summary)
    assert len(claims) == 5 and all(isinstance(c.held, bool) for c in claims)
    assert [n.startswith("reproduced") for n in summary["note"]] == [c.held for c in claims]


@pytest.mark.parametrize(("name", "overrides", "field"), [
    ("bias-component", {"shifted": "relu:shfit=theory"}, "shifted"),
    ("bias-component", {"widths": [4, 8, 16], "image_size": 18}, "image_size"),
    ("bias-component", {"min_fit": 0}, "min_fit"),
    ("vit-shift", {"unshifted": "gleu"}, "unshifted"),
    ("vit-shift", {"dim": 10, "heads": 4}, "heads"),
])
def test_invalid_configs_name_the_field(name, overrides, field):
    with pytest.raises(ConfigError) as info:
        build_config(get_experiment(name).Config, overrides)
    assert info.value.field == field
