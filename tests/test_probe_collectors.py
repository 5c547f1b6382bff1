"""Open probes: user metrics (register_metric), the one-shot pass (measure_once), and the new
built-in families, each against brute-force computations from our own hooks."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import actlab
from actlab.probe.collectors import Collector, available_metrics, unregister_metric


def _mlp(seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(5, 7), nn.ReLU(), nn.Linear(7, 6), nn.Tanh(), nn.Linear(6, 2))


def _capture(model: nn.Module, module: nn.Module, batches: list[torch.Tensor]):
    """Inputs and outputs of ``module`` for every batch (our own hook, no probe)."""
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []
    handle = module.register_forward_hook(lambda m, i, o: seen.append((i[0].detach(), o.detach())))
    with torch.no_grad():
        for x in batches:
            model(x)
    handle.remove()
    return seen


@pytest.fixture
def cleanup():
    names: list[str] = []
    yield names
    for name in names:
        unregister_metric(name)


def test_function_metric_in_training_matches_brute_force(cleanup) -> None:
    actlab.register_metric("act_abs_mean", lambda p, a: a.abs().mean())
    actlab.register_metric("preact_peak", lambda p, a: p.abs().amax(), reduce="max")
    cleanup += ["act_abs_mean", "preact_peak"]
    assert "act_abs_mean" in available_metrics()
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(1)
    batches = [torch.randn(4 + i, 5, generator=gen) for i in range(4)]
    probe = actlab.Probe(model, every=2, metrics=["act_abs_mean", "preact_peak", "sparsity"],
                         weights=False)
    expected = {}
    for step in range(4):
        # two passes per step (gradient accumulation): pooled by element count / max
        halves = batches[step].split([2, batches[step].shape[0] - 2])
        if step % 2 == 0:
            seen = _capture(model, model[3], list(halves))
            a_all = torch.cat([a.reshape(-1) for _, a in seen])
            p_peak = max(float(p.abs().max()) for p, _ in seen)
            expected[step] = (float(a_all.abs().double().mean()), p_peak)
        for half in halves:
            model(half).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        probe.step()
    df = probe.table()
    probe.close()
    for step, (abs_mean, peak) in expected.items():
        rows = df[(df.step == step) & (df.layer == "3")].set_index("metric")["value"]
        assert rows["act_abs_mean"] == pytest.approx(abs_mean, rel=1e-6)
        assert rows["preact_peak"] == pytest.approx(peak, rel=1e-6)
    assert set(df.step) == {0, 2}
    assert {"act_abs_mean", "preact_peak", "sparsity"} == set(df.metric)


class ChannelEnergy(Collector):
    """Root mean square of a block output, per pass sums on device, combined on the host."""

    metrics = ("h_rms", "h_passes")
    target = "block"

    def observe(self, where, h):
        h = h.detach().double()
        return torch.stack([(h * h).sum(), torch.tensor(float(h.numel()), dtype=h.dtype)]), None

    def combine(self, where, raw, meta):
        return {"h_rms": float(np.sqrt(raw[:, 0].sum() / raw[:, 1].sum())),
                "h_passes": float(len(raw))}


def test_collector_subclass_on_blocks(cleanup) -> None:
    actlab.register_metric(ChannelEnergy())
    cleanup += ["h_rms", "h_passes"]
    model = _mlp()
    batches = [torch.randn(3, 5), torch.randn(5, 5)]
    table = actlab.measure_once(model, batches, metrics=["h_rms", "h_passes"], blocks=["2"])
    out = torch.cat([o.reshape(-1) for _, o in _capture(model, model[2], batches)]).double()
    values = table.set_index("metric")["value"]
    assert values["h_rms"] == pytest.approx(float(out.pow(2).mean().sqrt()), rel=1e-12)
    assert values["h_passes"] == 2
    assert set(table.layer) == {"2"}


def test_register_metric_rejects_bad_input(cleanup) -> None:
    with pytest.raises(ValueError, match="built in"):
        actlab.register_metric("sparsity", lambda p, a: a.mean())
    with pytest.raises(ValueError, match="target"):
        actlab.register_metric("x_metric", lambda p, a: a.mean(), target="nowhere")
    with pytest.raises(ValueError, match="reduce"):
        actlab.register_metric("x_metric", lambda p, a: a.mean(), reduce="median")
    with pytest.raises(ValueError, match="callable"):
        actlab.register_metric("x_metric", 3)
    actlab.register_metric("x_metric", lambda p, a: a.mean())
    cleanup.append("x_metric")
    with pytest.raises(ValueError, match="already registered"):
        actlab.register_metric("x_metric", lambda p, a: a.std())
    with pytest.raises(ValueError, match="closest"):
        actlab.Probe(_mlp(), metrics=["x_metrik"])


def test_measure_once_matches_brute_force_and_restores_mode() -> None:
    model = _mlp().train()
    batches = [torch.randn(6, 5), torch.randn(4, 5)]
    table = actlab.measure_once(model, batches, eval_mode=True,
                                metrics=["preact_neg_frac", "act_mean", "sparsity",
                                         "saturation_frac", "down_input_range"],
                                input_modules=["2", "4"])
    assert model.training  # restored
    v = {(r.layer, r.metric): r.value for r in table.itertuples()}
    for site in ("1", "3"):
        seen = _capture(model, model[int(site)], batches)
        p = torch.cat([x.reshape(-1) for x, _ in seen]).double()
        a = torch.cat([y.reshape(-1) for _, y in seen]).double()
        assert v[(site, "preact_neg_frac")] == pytest.approx(float((p < 0).double().mean()))
        assert v[(site, "act_mean")] == pytest.approx(float(a.mean()), rel=1e-6)
        assert v[(site, "sparsity")] == pytest.approx(float((a.abs() < 1e-7).double().mean()))
    a3 = torch.cat([y.reshape(-1) for _, y in _capture(model, model[3], batches)])
    assert v[("3", "saturation_frac")] == pytest.approx(float((a3.abs() > 0.99).double().mean()))
    assert ("1", "saturation_frac") not in v  # ReLU is unbounded
    x4 = torch.cat([x.reshape(-1) for x, _ in _capture(model, model[4], batches)])
    assert v[("4", "down_input_range")] == pytest.approx(float(x4.max() - x4.min()), rel=1e-6)
    assert list(table.columns) == ["layer", "metric", "value"]
    with pytest.raises(ValueError, match="backward"):
        actlab.measure_once(model, batches, metrics=["preact_grad_mean"])


def test_input_row_sum_is_the_mean_row_sum_pooled_over_batches_of_any_size() -> None:
    model = _mlp()
    batches = [torch.randn(6, 5), torch.randn(4, 5)]
    table = actlab.measure_once(model, batches, metrics=["input_row_sum"],
                                input_modules=["2", "4"])
    v = {(r.layer, r.metric): r.value for r in table.itertuples()}
    for name in ("2", "4"):
        rows = torch.cat([x for x, _ in _capture(model, model[int(name)], batches)]).double()
        assert v[(name, "input_row_sum")] == pytest.approx(float(rows.sum(-1).mean()), rel=1e-12)


def test_training_one_shot_passes_match_hook_captures() -> None:
    """The recipes' activation_statistics and probe_forward (both measure_once now) against
    statistics computed from our own hook captures."""
    from actlab.recipes.image_classifier import activation_statistics
    from actlab.recipes.language_model import probe_forward

    model = _mlp()
    x = torch.randn(40, 5)
    stats = activation_statistics(model, x, batch_size=16)
    for name in ("1", "3"):  # the ReLU and the Tanh
        pairs = _capture(model, model[int(name)], list(x.split(16)))
        pre = torch.cat([i for i, _ in pairs])
        out = torch.cat([o for _, o in pairs])
        assert stats[name]["preact_neg_frac"] == pytest.approx(float((pre < 0).double().mean()))
        assert stats[name]["sparsity"] == pytest.approx(float((out.abs() < 1e-7).double().mean()))
    table = probe_forward(model, list(x.split(8)), metrics=("act_mean", "hidden_mean"),
                          blocks=["2"])
    got = {(r.layer, r.metric): r.value for r in table.itertuples()}
    hidden = torch.cat([o for _, o in _capture(model, model[2], list(x.split(8)))])
    assert got[("2", "hidden_mean")] == pytest.approx(float(hidden.double().mean()), rel=1e-6)
    relu_out = torch.cat([o for _, o in _capture(model, model[1], list(x.split(8)))])
    assert got[("1", "act_mean")] == pytest.approx(float(relu_out.double().mean()), rel=1e-6)


def test_massive_ratio_against_dense() -> None:
    model = _mlp()
    x = torch.randn(8, 5)
    x[0, 0] = 40.0  # one large input gives a few large hidden values
    table = actlab.measure_once(model, [x], metrics=["massive_ratio", "hidden_absmax",
                                                    "hidden_absmedian"], blocks=["2"])
    h = _capture(model, model[2], [x])[0][1].abs().reshape(-1).double()
    v = table.set_index("metric")["value"]
    assert v["hidden_absmax"] == pytest.approx(float(h.max()), rel=1e-6)
    assert v["hidden_absmedian"] == pytest.approx(float(h.median()), rel=1e-6)
    assert v["massive_ratio"] == pytest.approx(float(h.max() / h.median()), rel=1e-6)


def test_dead_units_on_conv_channels() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 4 * 4, 3))
    with torch.no_grad():
        model[0].bias[1] = -100.0  # channel 1 never fires
    batches = [torch.randn(2, 1, 6, 6), torch.randn(3, 1, 6, 6)]
    probe = actlab.Probe(model, every=1, weights=False)
    df = probe.dead_units(batches)
    probe.close()
    seen = _capture(model, model[1], batches)
    active = [(a.abs() > 1e-7).transpose(0, 1).reshape(4, -1).any(1) for _, a in seen]
    ever = torch.stack(active).any(0)
    row = df.set_index("layer").loc["1"]
    assert row["units"] == 4 and row["batches"] == 2
    assert row["dead_frac"] == pytest.approx(float((~ever).double().mean()))
    assert row["dead_frac"] >= 0.25
    per_batch = np.mean([float((~m).double().mean()) for m in active])
    assert row["dead_frac_per_batch"] == pytest.approx(per_batch)
    assert not model[1]._forward_hooks and not model[0]._forward_hooks
