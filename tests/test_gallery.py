"""The ``gallery`` experiment runs at --quick scale, writes its figures and reproduces published values."""

from __future__ import annotations

import json

import pytest

from actlab.errors import ConfigError
from actlab.experiments.gallery import GalleryConfig, gallery_claims
from actlab.runner.driver import RunOptions, run_experiment


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    outcome = run_experiment("gallery", "quick", options=RunOptions(out=out, progress=False))
    return outcome


def test_quick_run_writes_figures_summary_and_claims(quick_run):
    assert quick_run.ok, quick_run.failure_lines()
    figures = {p.name for p in (quick_run.path / "figures").glob("*.png")}
    # the experiment's four, and the runner's interval chart of the claims judged over seeds
    assert figures == {"activations.png", "gaussian_averages.png", "shifts_and_gains.png",
                       "variance_recursion.png", "claims_intervals.png"}
    summary = json.loads((quick_run.path / "summary.json").read_text())
    assert set(summary) == {"seed", "averages", "shifts", "gains", "recursion", "landmarks"}
    claims = json.loads((quick_run.path / "claims.json").read_text())
    assert len(claims) == 12 and len({c["id"] for c in claims}) == 12
    # the tables and landmarks are closed forms, decided by their value; the recursion claims
    # measure random networks and are judged over the three seeds
    recursion = [c for c in claims if c["source_key"] == "handbook" and "Checking" in c["where"]]
    assert len(recursion) == 4 and not any(c["deterministic"] for c in recursion)
    assert all(c["deterministic"] for c in claims if c not in recursion)
    assert all(c["n"] == 3 for c in recursion)
    seeds = json.loads((quick_run.path / "seed_summaries.json").read_text())
    assert seeds["seeds"] == [0, 1, 2] and not seeds["error"]
    assert [s["seed"] for s in seeds["summaries"]] == [0, 1, 2]
    ends = {s["recursion"]["ReLU, He"]["measured_net_input_variance"][-1]
            for s in seeds["summaries"]}
    assert len(ends) == 3  # every seed draws its own networks
    assert all(s["averages"] == summary["averages"] for s in seeds["summaries"])


def test_published_values_are_reproduced(quick_run):
    summary = quick_run.summary
    assert all(v["matches"] for v in summary["averages"].values() if "published" in v)
    assert sum("published" in v for v in summary["averages"].values()) == 8
    assert all(v["matches"] for v in summary["shifts"].values())
    assert summary["gains"]["relu"]["equal"] and not summary["gains"]["tanh"]["equal"]
    held = [c.held for c in gallery_claims(summary)]
    assert held[:3] == [True, True, True]


def test_claims_fail_when_the_numbers_are_wrong(quick_run):
    summary = json.loads(json.dumps(quick_run.summary))
    summary["averages"]["gelu"]["matches"] = False
    summary["shifts"]["relu"]["matches"] = False
    summary["recursion"]["ReLU, He"]["measured_error_variance"][3] *= 10
    held = [c.held for c in gallery_claims(summary)]
    assert held[0] is False and held[1] is False and held[3] is False


def test_landmarks_are_the_documents_and_fail_when_moved(quick_run):
    held = {c.id.split("/", 1)[1]: c for c in gallery_claims(quick_run.summary)}
    for name in ("gelu-silu/minima-match-handbook", "gelu-silu/peak-slopes-match-handbook",
                 "gelu-tanh/approximation-error-matches-handbook",
                 "silu/value-and-slope-at-minus-one"):
        assert held[name].held is True, name
    assert held["silu/value-and-slope-at-minus-one"].source_key == "gated-ffn-notes"
    assert held["gelu-silu/minima-match-handbook"].quoted == {
        "gelu_min": -0.17, "gelu_at": -0.7518, "silu_min": -0.2785, "silu_at": -1.2785}
    # sigmoid's slope is 0.01 at z = 4.5849, which rounds to 4.58, not the handbook's 4.59
    saturation = quick_run.summary["landmarks"]["sigmoid_saturation"]["at"]
    assert abs(saturation - 4.5849) < 1e-4
    assert held["sigmoid-tanh/saturation-points-match-handbook"].held is False
    summary = json.loads(json.dumps(quick_run.summary))
    summary["landmarks"]["gelu_minimum"]["at"] += 1e-4  # one unit of the fourth decimal
    summary["landmarks"]["silu_at_minus_one"]["slope"] = 0.0725
    moved = {c.id.split("/", 1)[1]: c.held for c in gallery_claims(summary)}
    assert moved["gelu-silu/minima-match-handbook"] is False
    assert moved["silu/value-and-slope-at-minus-one"] is False


def test_recursion_section_has_every_layer(quick_run):
    recursion = quick_run.summary["recursion"]
    assert set(recursion) == {"sigmoid, Xavier", "ReLU, He", "ReLU, Xavier", "ReLU, 1.5 x He"}
    for entry in recursion.values():
        assert len(entry["measured_net_input_variance"]) == 21  # 20 hidden + linear output
        assert len(entry["predicted_weight_gradient_norm"]) == 21


def test_by_construction_linear_gains_equal_torch():
    # recommended_gain returns 1 for PyTorch's linear names without computing anything, so the
    # equality with calculate_gain there is a test, not part of the fixed-point-gains claim
    from torch.nn.init import calculate_gain

    from actlab.init import recommended_gain

    for name in ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose2d"):
        assert recommended_gain(name) == calculate_gain(name) == 1.0


def test_gains_claim_counts_only_the_quadrature_gains(quick_run):
    summary = json.loads(json.dumps(quick_run.summary))
    gains = {c.id: c for c in gallery_claims(summary)}["gallery/all/fixed-point-gains"]
    assert gains.held is True and gains.deterministic
    summary["gains"]["leaky_relu"]["equal"] = False
    assert {c.id: c.held for c in gallery_claims(summary)}["gallery/all/fixed-point-gains"] is False


def test_bad_config_names_the_field():
    with pytest.raises(ConfigError, match="width"):
        GalleryConfig(width=0)
    with pytest.raises(ConfigError, match="q_shift"):
        GalleryConfig(q_shift=-1.0)
