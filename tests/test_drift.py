"""The drift experiment at a tiny scale: units, rows, summary keys, claims, config errors."""

from __future__ import annotations

import pytest

from actlab.errors import ConfigError
from actlab.runner.config import build_config
from actlab.runner.experiment import get_experiment

from _inline_run import run_inline

pytestmark = pytest.mark.usefixtures("one_thread")


TINY = {"activations": "relu,tanh,sugar", "conditions": "main,sweep", "steps": 120,
        "hidden": 32, "in_dim": 32, "n_random": 512, "record_every": 40, "loss_every": 5,
        "lr": 0.05, "sweep": "sgd:0.05,momentum:0.05", "sweep_activations": "relu"}


def _run(tmp_path, overrides):
    exp = get_experiment("drift")
    summary, table, _ = run_inline(exp, build_config(exp.Config, overrides), tmp_path)
    return exp, summary, table


def test_drift_tiny_run_summary_and_claims(tmp_path):
    exp, summary, table = _run(tmp_path, TINY)
    acts = summary["activations"]
    assert set(acts) == {"relu", "tanh", "sugar"}
    for entry in acts.values():
        for key in ("mean_shift_first_layer", "mean_shift_later_layers", "preact_grad_mean_sign",
                    "final_sparsity", "final_neg_frac"):
            assert key in entry
    relu = acts["relu"]
    # the shift is the last recorded weight mean minus the first, averaged over layers 2..6
    wm = table[(table["run"] == "main/relu") & (table["metric"] == "weight_mean")]
    per_layer = wm.sort_values("step").groupby("layer")["value"].agg(lambda v: v.iloc[-1] - v.iloc[0])
    expected = per_layer[[f"layer{i}" for i in range(2, 7)]].mean()
    assert relu["mean_shift_later_layers"] == pytest.approx(expected, rel=1e-9)
    assert relu["mean_shift_later_layers"] < 0 and relu["preact_grad_mean_sign"] == 1
    assert abs(acts["tanh"]["mean_shift_later_layers"]) < abs(relu["mean_shift_later_layers"])
    # sugar shares init and batches with relu, and still trains differently
    assert acts["sugar"]["loss_gap_vs_relu"] > 1e-4
    # ReLU's eval sparsity equals its share of negative inputs (exact zeros)
    assert relu["final_sparsity"] == pytest.approx(relu["final_neg_frac"], abs=1e-6)
    assert set(summary["sweep"]["relu"]) == {"sgd:0.05", "momentum:0.05"}
    claims = exp.claims(summary)
    held = {c.claim.split(",")[0]: c.held for c in claims}
    # The claims of "Bug or Feature²", decided from the summary here: negative drift in every
    # hidden layer from layer 2 on and none in layer 1 (positively biased), none for tanh.
    for act in ("relu", "sugar"):
        e = acts[act]
        per, first, later = (e["mean_shift_per_layer"], e["mean_shift_first_layer"],
                             e["mean_shift_later_layers"])
        hidden = [v for k, v in per.items() if k not in ("layer1", f"layer{len(per)}")]
        assert held[act] is (all(v < 0 for v in hidden) and later < 0
                             and abs(first) < 0.2 * abs(later)), act
    positive = sorted(abs(acts[a]["mean_shift_later_layers"]) for a in ("relu", "sugar"))
    median = sum(positive) / 2
    assert held["tanh"] is (abs(acts["tanh"]["mean_shift_later_layers"]) < 0.2 * median)
    assert any("momentum" in c.claim for c in claims)
    assert (tmp_path / "figures" / "drift_main.png").exists()


def test_drift_is_deterministic(tmp_path):
    small = {**TINY, "activations": "noisy_relu", "conditions": "main", "steps": 30}
    _, first, _ = _run(tmp_path, small)
    _, second, _ = _run(tmp_path, small)
    assert first["activations"] == second["activations"]


def test_drift_config_errors_name_the_field():
    exp = get_experiment("drift")
    with pytest.raises(ConfigError, match="conditions"):
        build_config(exp.Config, {"conditions": "main,bogus"})
    with pytest.raises(ConfigError, match="sweep"):
        build_config(exp.Config, {"sweep": "sdg:0.1"})
    with pytest.raises(ConfigError, match="init"):
        build_config(exp.Config, {"init": "kaiming"})
    with pytest.raises(ConfigError, match="activations"):
        build_config(exp.Config, {"activations": "rleu"})


def test_a_sweep_point_whose_seeds_all_diverged_leaves_its_claims_undecided():
    # Diverged seeds stop after a few steps with drift near 0; reading that as "no drift"
    # would fail the claims for the wrong reason.
    point = {"drift_z_early": 0.01, "mean_shift_later_layers": -1e-3, "final_loss": 1.0,
             "diverged_seeds": 0}
    sweep = {"sgd:0.01": {**point, "drift_z_final": 0.05},
             "sgd:0.05": {**point, "drift_z_final": 0.2},
             "momentum:0.01": {**point, "drift_z_final": 0.25},
             "momentum:0.05": {**point, "drift_z_final": None, "diverged_seeds": 3}}
    claims = {c.id: c for c in get_experiment("drift").claims({"sweep": {"relu": sweep}})}
    lost = claims["drift/relu/lr-0.05/momentum-drifts-faster"]
    assert lost.held is None and "momentum:0.05 (3 seeds diverged)" in lost.measured
    assert claims["drift/relu/momentum/higher-lr-larger-drift"].held is None
    assert claims["drift/relu/lr-0.01/momentum-drifts-faster"].held is True
    assert claims["drift/relu/sgd/higher-lr-larger-drift"].held is True


# ------------------------------------------------------------------ real data and its ablation
REAL = {"activations": "relu,silu,noisy_relu", "conditions": "main,digits,"
        "digits-default-init,digits-skip", "steps": 20, "hidden": 16, "in_dim": 16,
        "n_random": 256, "record_every": 20, "loss_every": 5}


def test_real_data_under_both_inits_first_and_the_figure_claims(tmp_path):
    exp, summary, table = _run(tmp_path, REAL)
    assert list(summary)[:2] == ["scale", "real_data"]  # the reader sees it first
    real = summary["real_data"]
    assert set(real) == {"setting", "he-init", "torch-default-init"}
    assert set(real["he-init"]) == {"relu", "silu", "noisy_relu"}
    assert set(real["torch-default-init"]) == {"relu"}  # side conditions: relu only
    assert real["setting"]["data"] == "digits" and real["setting"]["input_dim"] == "native"
    assert {"digits-skip/relu", "digits-default-init/relu"} <= set(table["run"])
    assert (tmp_path / "figures" / "drift_real_seeds.png").exists()  # seed by seed
    relu = summary["activations"]["relu"]
    # the drift up to the fit: "fitted" means a loss below 1 % of the first; 20 steps may not
    assert relu["digits"]["fit_seeds"] in (0, 1)
    assert (relu["digits"]["mean_shift_at_fit"] is None) == (relu["digits"]["fit_seeds"] == 0)
    claims = {c.id: c for c in exp.claims(summary)}
    assert list(claims)[:2] == ["drift/relu/digits/drift-negative", "drift/relu/digits/sparsity-rises"]
    # Fig. 9: the ratio of the skip MLP's signed shift to the plain one's
    ratio = relu["digits-skip"]["mean_shift_later_layers"] / relu["digits"]["mean_shift_later_layers"]
    shift = claims["drift/relu/digits-skip/mean-shift-unchanged"]
    assert shift.value == pytest.approx(ratio) and shift.held is (0.5 < ratio < 2)
    # the depth order: the least-squares slope (closed form) of the shift over layers 2..6
    per = relu["mean_shift_per_layer"]
    layers = list(range(2, 7))
    values = [per[f"layer{i}"] for i in layers]
    mx, my = sum(layers) / 5, sum(values) / 5
    slope = sum((a - mx) * (b - my) for a, b in zip(layers, values)) / sum((a - mx) ** 2 for a in layers)
    earlier = claims["drift/relu/depth-order/earlier-layers-more-negative"]
    deeper = claims["drift/relu/depth-order/deeper-layers-more-negative"]
    assert earlier.value == pytest.approx(slope) and earlier.held is (slope > 0)
    assert deeper.held is (slope < 0) and deeper.source_key == "bug-or-feature-short"
    # the gradient transient reads the logged weight-gradient norms
    norms = table[(table["run"] == "digits/relu") & (table["metric"] == "weight_grad_norm")]
    curve = norms.groupby("step")["value"].mean()
    assert relu["digits"]["grad_norm_peak_step"] == int(curve.idxmax())
    for cid in ("drift/silu/drifts-less-than-relu", "drift/silu/last-layer-barely-drifts",
                "drift/relu/digits-skip/drift-z-unchanged", "drift/relu/digits/sparsity-near-paper",
                "drift/relu/digits-skip/sparsity-near-paper", "drift/relu/digits-skip/sparsity-lower",
                "drift/relu/digits/gradient-transient", "drift/noisy-relu/digits/drifts-most",
                "drift/relu/digits-default-init/drift-negative"):
        assert cid in claims, cid


def test_real_data_fields_change_the_inputs_as_documented():
    import torch

    from actlab.data.digits import load_digits
    from actlab.experiments.drift.real_data import load_real

    exp = get_experiment("drift")

    def real(**overrides):
        return load_real(build_config(exp.Config, overrides))

    x, y, x_eval, y_eval, dim, classes = real(real_centring="per-feature", real_classes=3)
    assert (dim, classes) == (64, 3) and set(y.tolist()) == {0, 1, 2} and set(y_eval.tolist()) <= {0, 1, 2}
    varying = x.std(0) > 0
    torch.testing.assert_close(x.mean(0), torch.zeros(64), atol=1e-4, rtol=0)  # float32 sums
    torch.testing.assert_close(x.std(0)[varying], torch.ones(int(varying.sum())), atol=1e-4, rtol=0)
    x, *_ = real(real_centring="none")  # raw pixels: the digits' 0..16 scaled to [0, 1]
    raw = load_digits(standardize=False).x_train.flatten(1)
    torch.testing.assert_close(x, raw)
    assert float(x.min()) == 0.0 and float(x.max()) == 1.0
    x, *_, dim, _ = real(real_input_dim=3072)  # CIFAR-10's 3 x 32 x 32
    assert dim == 3072
    torch.testing.assert_close(x, load_digits(image_size=32, channels=3).x_train.flatten(1))
    x, _, x_eval, _, dim, _ = real(real_input_dim=3072, real_lift="project")
    matrix = torch.randn(64, 3072, generator=torch.Generator().manual_seed(0)) / 8.0
    torch.testing.assert_close(x, load_digits().x_train.flatten(1) @ matrix)
    # D.2's length on the digits: five epochs of CIFAR-10's 50,000 images at batch 128
    config = build_config(exp.Config, {"epochs": 5, "real_epoch_size": 50_000})
    assert config.unit_steps(1438, real=True) == 5 * (50_000 // 128) == 1950
    assert config.unit_steps(12_800) == 5 * 100  # random data keeps its own epochs


def test_real_data_field_errors_name_the_field(tmp_path):
    exp = get_experiment("drift")
    with pytest.raises(ConfigError, match="real_epoch_size"):
        build_config(exp.Config, {"real_epoch_size": 50_000})
    with pytest.raises(ConfigError, match="real_input_dim"):
        build_config(exp.Config, {"real_input_dim": 3000})
    with pytest.raises(ConfigError, match="real_centring"):
        build_config(exp.Config, {"real_centring": "per-pixel"})


def test_the_real_data_conditions_read_a_cifar_folder(tmp_path):
    import numpy as np
    import torch
    from test_data_files import _write_fake_cifar

    from actlab.experiments.drift.real_data import load_real

    folder = tmp_path / "cifar" / "cifar-10-batches-py"
    stored = _write_fake_cifar(folder, 8, np.random.default_rng(0))
    exp = get_experiment("drift")
    with pytest.raises(ConfigError, match="real_lift"):
        build_config(exp.Config, {"cifar_dir": str(folder), "real_input_dim": 3072})
    config = build_config(exp.Config, {"cifar_dir": str(folder), "real_centring": "none"})
    x, y, *_, dim, classes = load_real(config)
    expected = np.concatenate([stored[f"data_batch_{i}"][0] for i in range(1, 6)]) / 255.0
    assert (dim, classes) == (3072, 10) and x.shape == (40, 3072)
    torch.testing.assert_close(x.double(), torch.from_numpy(expected), atol=1e-6, rtol=0)
    _, summary, table = _run(tmp_path / "run", {
        "activations": "relu", "conditions": "digits,digits-default-init", "steps": 3,
        "batch_size": 8, "real_hidden": 16, "record_every": 1, "cifar_dir": str(folder)})
    assert summary["real_data"]["setting"]["data"] == "cifar-10"
    assert set(summary["real_data"]) == {"setting", "he-init", "torch-default-init"}
    assert set(table["run"]) == {"digits/relu", "digits-default-init/relu"}
