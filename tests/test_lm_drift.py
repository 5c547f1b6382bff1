"""lm-drift: the two optimizer arms differ only in the optimizer, the trajectories are the
quantities they name, and the claims follow the numbers."""

from __future__ import annotations

import pytest
import torch

from actlab.errors import ConfigError
from actlab.experiments.lm_drift import LMDriftConfig, LMDriftExperiment
from actlab.runner.driver import RunOptions, run_experiment

from _corpus import write_code_folder

TOY = {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 16, "batch_size": 4, "steps": 6,
       "eval_batches": 1, "log_every": 3, "probe_every": 3, "probe_batches": 1,
       "activations": "relu"}


def test_the_adamw_arm_changes_only_the_optimizer() -> None:
    config = LMDriftConfig(steps=700)
    muon, adamw = config.arm("muon").train_config(), config.arm("adamw").train_config()
    assert (muon.optimizer, adamw.optimizer) == ("muon", "adamw")
    for field in ("schedule", "warmup", "warmdown", "eval_every", "weight_decay", "grad_clip",
                  "steps"):
        assert getattr(muon, field) == getattr(adamw, field), field
    assert adamw.lr == config.adamw_lr and muon.schedule == "trapezoid"
    with pytest.raises(ConfigError, match="adamw_lr"):
        LMDriftConfig(adamw_lr=0.0)
    # the norm arms change the model's normalisation only
    for optimizer in ("muon", "adamw"):
        rms = config.arm(optimizer, "rmsnorm")
        assert rms.model_config().norm == "rmsnorm"
        assert rms.train_config() == config.arm(optimizer).train_config()
    with pytest.raises(ConfigError, match="norms"):
        LMDriftConfig(norms=["batchnorm"])


def test_toy_run_records_trajectories_from_step_zero(tmp_path, monkeypatch) -> None:
    root = write_code_folder(tmp_path / "text", files=8, repeats=40)
    monkeypatch.setenv("ACTLAB_CACHE", str(tmp_path / "cache"))
    outcome = run_experiment("lm-drift", "default", {**TOY, "data": str(root)}, n_seeds=1,
                             options=RunOptions(out=tmp_path, progress=False))
    assert outcome.ok, outcome.failure_lines()
    arms = outcome.summary["arms"]
    assert set(arms) == {f"{n}/{o}/relu" for n in ("layernorm", "rmsnorm")
                         for o in ("muon", "adamw")}
    for name, arm in arms.items():
        assert arm["z_score"]["start"] == 0.0 and arm["z_score"]["end"] > 0
        assert arm["mean_drift_share"]["start"] == 0.0
        assert 0 <= arm["mean_drift_share"]["end"] <= 1  # |E[d]| <= E|d|
        assert {"b_mean", "w_mean_part", "preact_mean", "column_part", "down_w_mean",
                "down_z_score", "down_mean_drift_share"} <= set(arm)
        assert arm["down_z_score"]["start"] == 0.0 and arm["down_z_score"]["end"] > 0
        if name.startswith("layernorm"):  # LayerNorm at beta 0 centres h; RMSNorm does not
            assert arm["w_mean_part"]["start"] == pytest.approx(0.0, abs=1e-6)
        # ReLU's zeros are its negative inputs
        assert arm["sparsity"]["end"] == pytest.approx(arm["preact_neg_frac"]["end"], abs=1e-6)
    assert (outcome.path / "figures" / "lm_drift.png").exists()


def test_mean_drift_share_is_one_for_a_uniform_shift() -> None:
    # the recorder's quantity on a known change: every weight moved by -0.01 -> share 1;
    # a change of zero mean -> share 0
    w0 = torch.randn(64, 16, generator=torch.Generator().manual_seed(0))
    for w, share in ((w0 - 0.01, 1.0), (w0 + 0.01 * torch.tensor([1.0, -1.0]).repeat(512).view(64, 16), 0.0)):
        moved = (w - w0).abs().mean()
        assert float((w - w0).mean().abs() / moved) == pytest.approx(share, abs=1e-6)


def _arm(shift: float, down: float, neg: tuple[float, float], share: float) -> dict:
    return {"w_mean": {"change": shift}, "down_w_mean": {"change": down},
            "preact_neg_frac": {"start": neg[0], "end": neg[1]},
            "mean_drift_share": {"end": share}}


def test_claims_follow_the_numbers() -> None:
    good = {"activations": ["relu"], "norms": ["layernorm", "rmsnorm"], "arms": {
        f"{norm}/{opt}/relu": _arm(-1e-4 if opt == "adamw" else 1e-5, -1e-5, (0.5, 0.6),
                                   0.02 if opt == "adamw" else 0.002)
        for norm in ("layernorm", "rmsnorm") for opt in ("adamw", "muon")}}
    held = {c.id.removeprefix("lm-drift/"): (c.held, c.source_key)
            for c in LMDriftExperiment().claims(good)}
    paper, ours = "bug-or-feature", "actlab"
    expected = {}
    for norm in ("layernorm", "rmsnorm"):
        expected |= {f"{norm}/adamw/relu/down-projection-drifts-negative": (True, paper),
                     f"{norm}/adamw/relu/negative-share-rises": (True, paper),
                     f"{norm}/adamw/relu/up-weight-mean-falls": (True, ours),
                     f"{norm}/muon/relu/negative-share-rises": (True, paper),
                     f"{norm}/muon/relu/smaller-mean-drift-share": (True, ours)}
    # Muon behind LayerNorm cannot move the down-projection's mean: no claim there
    expected["rmsnorm/muon/relu/down-projection-drifts-negative"] = (True, paper)
    assert held == expected
    bad = {**good, "arms": {name: _arm(1e-4, 1e-5, (0.6, 0.5), 0.02 if "muon" in name else 0.002)
                            for name in good["arms"]}}
    assert not any(c.held for c in LMDriftExperiment().claims(bad))


def test_weight_mean_part_and_bias_account_for_the_mean_preactivation_of_uniform_columns() -> None:
    # mean_j (W h + b)_j = sum_k colmean_k h_k + mean(b): when every column equals the weight
    # mean, the recorder's w_mean_part + b_mean must give the probe's preact_mean, a separate
    # measurement on the activation's input
    from actlab.experiments.lm_drift import _trajectory_recorder
    from actlab.nn.gpt import GPT
    from actlab.runner.experiment import UnitResult

    config = LMDriftConfig(**{k: v for k, v in TOY.items() if k != "activations"},
                           activations=["gelu"])
    model = GPT(config.model_config(activation="gelu"), seed=0)
    with torch.no_grad():
        for i, block in enumerate(model.blocks):
            block.mlp.up.weight.fill_(0.05 * (i + 1) - 0.02)
            block.mlp.up.bias.uniform_(-0.3, 0.1)
            block.norm2.bias.uniform_(0.1, 0.3)  # at beta = 0 the row sums of h vanish
    windows = [torch.randint(0, 256, (4, 16), generator=torch.Generator().manual_seed(1))]
    result = UnitResult()
    _trajectory_recorder(result, "arm", 0, model, windows, config)(0)
    values = {(layer, metric): value for _, _, _, layer, metric, value in result.rows}
    for i in range(len(model.blocks)):
        parts = values[(str(i), "w_mean_part")] + values[(str(i), "b_mean")]
        assert abs(values[(str(i), "w_mean_part")]) > 1e-3  # the LayerNorm's shift is not zero
        assert parts == pytest.approx(values[(str(i), "preact_mean")], rel=1e-4, abs=1e-6)


def test_muon_leaves_the_down_projection_mean_alone_behind_layernorm_only() -> None:
    # the residual stream is read only through LayerNorms, whose input gradient sums to zero
    # per token; the down-projection's gradient then has zero column sums, and Newton-Schulz
    # (polynomials in X X^T times X) keeps them zero, so Muon cannot move its weight mean.
    # RMSNorm does not centre, and the mean moves.
    from actlab.nn.gpt import GPT, GPTConfig
    from actlab.train.muon import make_muon, muon_split

    changes = {}
    for norm in ("layernorm", "rmsnorm"):
        model = GPT(GPTConfig(vocab_size=64, n_layer=2, n_head=2, n_embd=16, block_size=16,
                              norm=norm), seed=0)
        hidden, rest = muon_split(model)
        optimizer = make_muon([{"params": [p for _, p in rest]},
                               {"params": [p for _, p in hidden], "muon": True}], lr=0.01)
        downs = [block.mlp.down.weight for block in model.blocks]
        start = [float(w.detach().double().mean()) for w in downs]
        tokens = torch.Generator().manual_seed(0)
        for _ in range(5):
            idx = torch.randint(0, 64, (4, 17), generator=tokens)
            _, loss = model(idx[:, :-1], idx[:, 1:])
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        changes[norm] = max(abs(float(w.detach().double().mean()) - s)
                            for w, s in zip(downs, start))
    assert changes["rmsnorm"] > 1e-5
    assert changes["layernorm"] < 1e-3 * changes["rmsnorm"]
