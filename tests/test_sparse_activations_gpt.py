"""The GPT column of sparse-activations (Table 1's GPT-nano column): a tiny run and its claims."""

from __future__ import annotations

import pytest

from actlab.errors import ConfigError
from actlab.runner.config import build_config
from actlab.runner.experiment import get_experiment

from _inline_run import run_inline

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = {"setups": "gpt:layernorm", "activations": "relu,gelu", "gpt_steps": 8,
        "gpt_n_layer": 1, "gpt_n_embd": 16, "gpt_block_size": 16, "gpt_batch_size": 4,
        "gpt_probe_batches": 1}


def test_gpt_cells_report_loss_and_shares(tmp_path, monkeypatch):
    monkeypatch.setenv("ACTLAB_CACHE", str(tmp_path / "cache"))
    exp = get_experiment("sparse-activations")
    summary, _, _ = run_inline(exp, build_config(exp.Config, TINY), tmp_path, [(0, 1)])
    relu, gelu = (summary["table"]["gpt:layernorm"][a] for a in ("relu", "gelu"))
    for cell in (relu, gelu):
        assert cell["seeds"] == 2 and cell["accuracy_mean"] is None
        assert 0 < cell["test_loss_mean"] < 6.0  # below a uniform guess over bytes, ln 256 = 5.55
        assert 0 < cell["neg_frac_mean"] < 1
    # ReLU's zeros are exactly its negative inputs; GELU makes (almost) no exact zeros
    assert relu["sparsity_mean"] == pytest.approx(relu["neg_frac_mean"], abs=1e-6)
    assert gelu["sparsity_mean"] < 0.05
    assert summary["table_text"][0].startswith("gpt:layernorm | relu: ")


def test_gpt_setup_names_a_norm_the_gpt_has():
    exp = get_experiment("sparse-activations")
    with pytest.raises(ConfigError, match="setups"):
        build_config(exp.Config, {"setups": "gpt:batchnorm"})
    with pytest.raises(ConfigError, match="gpt_"):
        build_config(exp.Config, {"setups": "gpt:rmsnorm", "gpt_optimizer": "lion"})


def _cells(losses: dict[str, float]) -> dict:
    return {"table": {"gpt:layernorm": {
        a: {"accuracy_mean": None, "test_loss_mean": v, "neg_frac_mean": 0.6,
            "sparsity_mean": 0.6 if "relu" in a else 0.0}
        for a, v in losses.items()}}}


def test_gpt_claims_follow_the_ranking():
    exp = get_experiment("sparse-activations")
    paper_order = {"relu2": 3.20, "gelu": 3.21, "relu": 3.25, "silu": 3.22, "sugar": 3.30}
    held = {c.id: c.held for c in exp.claims(_cells(paper_order))}
    assert held["sparse-activations/relu2/gpt-layernorm/best-loss"] is True
    assert held["sparse-activations/gelu/gpt-layernorm/second-best-loss"] is True
    swapped = {**paper_order, "relu2": 3.26}  # relu2 now fourth, gelu first
    held = {c.id: c.held for c in exp.claims(_cells(swapped))}
    assert held["sparse-activations/relu2/gpt-layernorm/best-loss"] is False
    assert held["sparse-activations/gelu/gpt-layernorm/second-best-loss"] is False
