"""The ``gn-bounds`` experiment: a tiny run end to end, its numbers against dense references,
its claims against wrong numbers, its config errors, and the one-block recipe."""

from __future__ import annotations

import copy

import pytest
import torch

from actlab.data.synthetic import gaussian_inputs
from actlab.errors import ConfigError
from actlab.experiments.gn_bounds import GnBounds, block_activations
from actlab.experiments.gn_bounds.claims import claims
from actlab.nn.residual_mlp import ResidualMLP
from actlab.recipes.one_block import one_block_pair, train_one_block
from actlab.runner.claims import claim_problems
from actlab.runner.config import build_config
from actlab.train.settings import TrainSettings

from _inline_run import run_inline

TINY = {
    "d": 3,
    "m": 8,
    "steps": 120,
    "batch_size": 32,
    "log_points": 4,
    "n_curvature": 64,
    "sweep_points": 7,
    "refine_steps": 4,
    "joint_blocks": 2,
}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    folder = tmp_path_factory.mktemp("gn")
    try:
        config = build_config(GnBounds.Config, TINY)
        summary, table, results = run_inline(GnBounds(), config, folder, [(0, 1)])
    finally:
        torch.set_num_threads(previous)
    return config, summary, table, results, folder


def test_tiny_run_measures_every_checkpoint_and_judges_its_claims(tiny_run):
    config, summary, table, results, _ = tiny_run
    assert all(r["status"] == "ok" for r in results)
    one = summary["one_block"]
    assert one["steps"][0] == 0 and 100 in one["steps"] and one["steps"][-1] == 120
    assert one["seeds"] == [0, 1] and one["points"] == 2 * len(one["steps"])
    assert one["violations"] == {"eq37": 0, "eq38": 0, "eq46": 0} and one["fixed_gates"]
    assert min(one["mean"]["ratio_mu_star"]) >= 1.0  # μ̄ is on the grid, b* the minimum
    assert all(g >= 0 for g in one["mean"]["upper_gap_max"] + one["mean"]["lower_gap_max"])
    sweeps = results[0]["data"]["sweeps"]
    sweep = sweeps["1/120"]
    assert sweep["b"][len(sweep["b"]) // 2] == sweep["mu_bar"]
    assert sweep["lambda_g_star"] <= min(sweep["lambda_g"])
    assert (
        summary["joint"]["init"]["lambda_floor"] <= summary["joint"]["init"]["lambda_layer_means"]
    )
    judged = claims(summary)
    assert [c.id for c in judged] == [
        "gn-bounds/relu/bounds-closely-track",
        "gn-bounds/relu/mean-shift-remains-close",
        "gn-bounds/relu/hessian-close-to-gn-after-100",
        "gn-bounds/joint/layer-mean-shifts-near-floor",
    ]
    assert claim_problems(judged) == []


def test_theorems_hold_at_every_point_of_a_run(tiny_run):
    """Eqs. 37, 38 (with eq. 28's ‖ε‖²), 46 and eq. 28 stacked (eq. 49) at every checkpoint,
    seed and shift a run measures: a check of the experiment's code (the theorems cannot fail
    against their proofs), so a test, not a claim."""
    _, summary, table, _, _ = tiny_run
    one, joint = summary["one_block"], summary["joint"]
    assert one["violations"] == {"eq37": 0, "eq38": 0, "eq46": 0}
    assert one["points"] == 2 * len(one["steps"]) and joint["violations_eq49"] == 0
    # the counts are the rows' sums, so a violation recorded in a row would show here
    rows = table[table.metric.str.startswith("violations_")]
    seeds = len(one["seeds"])
    assert len(rows) == 3 * one["points"] + seeds * len(joint["steps"]) and rows.value.sum() == 0
    for label in ("init", "trained"):  # eq. 28 stacked, on the seed means (linear in them)
        at, slack = joint[label], 1e-9 * joint[label]["lambda_floor"]
        assert at["lambda_floor"] - slack <= at["lambda_layer_means"]
        assert at["lambda_layer_means"] <= at["lambda_floor"] + at["eps_sq"] + slack
    figures = {p.stem for p in (tiny_run[4] / "figures").glob("*.png")}
    assert figures == {
        "fig10_bounds_sweep",
        "fig10_ratio",
        "fig11_hessian_vs_gn",
        "eq49_joint_sharpness",
    }


@pytest.mark.usefixtures("one_thread")
def test_recorded_numbers_match_a_dense_recomputation_at_initialisation(tiny_run):
    config, _, table, _, _ = tiny_run
    seed = 1
    _, student = one_block_pair(
        config.d, config.m, "relu", config.student_spec, seed, torch.float64
    )
    A, B = student.up.weight.detach(), student.down.weight.detach()
    x = gaussian_inputs([seed], config.n_curvature, config.d, "eval", torch.float64)[0]
    a = torch.relu(x @ A.T)
    mu = float(a.mean())

    def f(theta):
        n_a = A.numel()
        return (torch.relu(x @ theta[:n_a].reshape(A.shape).T) - mu) @ theta[n_a:].reshape(
            B.shape
        ).T

    theta = torch.cat([A.reshape(-1), B.reshape(-1)])
    jac = torch.func.jacrev(f)(theta)
    lam_g = float(torch.linalg.eigvalsh(torch.einsum("nop,noq->pq", jac, jac) / len(x))[-1])
    row = table[(table.seed == seed) & (table.step == 0) & (table.run == "one-block")]
    value = dict(zip(row.metric, row.value))
    assert value["mu_bar"] == pytest.approx(mu, rel=1e-12)
    assert value["lambda_g_mu"] == pytest.approx(lam_g, rel=1e-10)
    assert value["lambda_gn_mu"] == pytest.approx(lam_g, rel=1e-10)


def _broken(summary, **changes):
    out = copy.deepcopy(summary)
    for key, value in changes.items():
        part, name = key.split("__")
        out[part][name] = value
    return {c.id.rsplit("/", 1)[-1]: c.held for c in claims(out)}


def test_claims_fail_when_the_numbers_are_wrong(tiny_run):
    summary = tiny_run[1]
    good = dict(summary)
    good["one_block"] = {
        **summary["one_block"],
        "upper_gap_max_worst": 0.1,
        "lower_gap_max_worst": 0.1,
        "ratio_mu_star_worst": 1.02,
        "hg_rel_after_worst": 0.01,
    }
    verdicts = _broken(good)
    assert verdicts["bounds-closely-track"] and verdicts["mean-shift-remains-close"]
    assert verdicts["hessian-close-to-gn-after-100"]
    assert not _broken(good, one_block__lower_gap_max_worst=0.3)["bounds-closely-track"]
    assert not _broken(good, one_block__ratio_mu_star_worst=1.2)["mean-shift-remains-close"]
    assert not _broken(good, one_block__hg_rel_after_worst=0.2)["hessian-close-to-gn-after-100"]
    assert _broken(good, one_block__steps_after=[])["hessian-close-to-gn-after-100"] is None
    joint = copy.deepcopy(summary["joint"])
    joint["trained"]["layer_means_over_floor"] = 1.5
    assert not _broken(good, **{"joint__trained": joint["trained"]})["layer-mean-shifts-near-floor"]


def test_config_errors_name_their_field():
    with pytest.raises(ConfigError, match="sweep_points"):
        build_config(GnBounds.Config, {"sweep_points": 10})
    with pytest.raises(ConfigError, match="activation"):
        build_config(GnBounds.Config, {"activation": "relu:shift=0.1"})
    with pytest.raises(ConfigError, match="student.*did you mean shifted"):
        build_config(GnBounds.Config, {"student": "shiftd"})
    with pytest.raises(ConfigError, match="lr"):
        build_config(GnBounds.Config, {"lr": 0})


@pytest.mark.usefixtures("one_thread")
def test_block_activations_are_the_blocks_own():
    model = ResidualMLP(4, 6, 3, "relu", generator=torch.Generator().manual_seed(0)).double()
    x = torch.randn(16, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    acts = block_activations(model, x, torch.nn.ReLU())
    h = x
    for block, a in zip(model.blocks, acts):
        h, own = block(h)
        torch.testing.assert_close(a, own)


@pytest.mark.usefixtures("one_thread")
def test_one_block_recipe_trains_seeds_independently():
    settings = TrainSettings(lr=1e-2, steps=15, batch_size=16, loss="half_sse", dtype="float64")
    both = train_one_block(settings, 3, 5, "relu", "relu:shift=theory", [0, 1], at=[0, 15])
    alone = train_one_block(settings, 3, 5, "relu", "relu:shift=theory", [1], at=[0, 15])
    assert both.steps == alone.steps == [0, 15]
    for ti in range(2):
        for x, y in zip(both.parameters(ti, 1), alone.parameters(ti, 0)):
            torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-14)
    A0, A1 = both.parameters(0, 0)[0], both.parameters(1, 0)[0]
    assert not torch.equal(A0, A1)  # it trained
    assert both.train_loss.shape == (2, 15) and not both.diverged.any()
    assert both.train_loss[0, -1] < both.train_loss[0, 0]
