"""Probe metrics against brute-force recomputation (by hand and with torch.autograd.grad)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

import actlab
from actlab.errors import ConfigError
from actlab.probe.schedule import AtSteps, Every, LogSpaced, as_schedule

EPS = 1e-7


class Tiny(nn.Module):
    """Activations called as modules from a custom forward; float64 for exact comparisons."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(5, 7)
        self.act1 = nn.ReLU()
        self.fc2 = nn.Linear(7, 6)
        self.act2 = nn.Tanh()
        self.head = nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.act2(self.fc2(self.act1(self.fc1(x)))))


def make_tiny(seed: int = 0) -> Tiny:
    torch.manual_seed(seed)
    model = Tiny().double()
    with torch.no_grad():
        model.fc2.weight.mul_(4.0)  # push some tanh units into saturation
    return model


def brute_force(model: Tiny, xs: list[torch.Tensor], ys: list[torch.Tensor]) -> dict:
    """Every metric of one step recomputed by hand on the concatenated passes."""
    p1s, p2s, loss = [], [], 0.0
    for x, y in zip(xs, ys):
        p1 = model.fc1(x)
        a1 = torch.relu(p1)
        p2 = model.fc2(a1)
        a2 = torch.tanh(p2)
        loss = loss + ((model.head(a2) - y) ** 2).mean()
        p1s.append(p1)
        p2s.append(p2)
    weights = [model.fc1.weight, model.fc2.weight, model.head.weight]
    grads = torch.autograd.grad(loss, p1s + p2s + weights)
    g1 = torch.cat([g.reshape(-1, 7) for g in grads[:len(xs)]])
    g2 = torch.cat([g.reshape(-1, 6) for g in grads[len(xs):2 * len(xs)]])
    p1 = torch.cat([p.reshape(-1, 7) for p in p1s]).detach()
    p2 = torch.cat([p.reshape(-1, 6) for p in p2s]).detach()
    x1 = torch.cat([x.reshape(-1, 5) for x in xs])
    a1, a2 = torch.relu(p1), torch.tanh(p2)
    out = {}
    for name, p, a, g, x in (("act1", p1, a1, g1, x1), ("act2", p2, a2, g2, a1)):
        # covariance over rows of every (g_i, x_k) pair, then the mean over (i, k)
        cov = (g.T @ x) / len(g) - g.mean(0)[:, None] * x.mean(0)[None, :]
        out[name] = {
            "preact_neg_frac": (p < 0).double().mean(), "preact_mean": p.mean(),
            "preact_std": p.std(unbiased=False), "act_mean": a.mean(),
            "act_std": a.std(unbiased=False), "sparsity": (a.abs() < EPS).double().mean(),
            "act_max": a.max(), "act_min": a.min(), "act_range": a.max() - a.min(),
            "preact_grad_mean": g.mean(), "preact_grad_cov": cov.mean(),
        }
    out["act2"]["saturation_frac"] = ((a2 < -0.99) | (a2 > 0.99)).double().mean()
    out["fc2"] = {"hidden_mean": p2.mean()}  # fc2 is registered as a "block"
    for name, gw in zip(("fc1", "fc2", "head"), grads[2 * len(xs):]):
        out[name] = {**out.get(name, {}), "grad_norm": gw.norm(), "grad_mean": gw.mean()}
    return {layer: {k: float(v) for k, v in d.items()} for layer, d in out.items()}


def weight_brute(w: torch.Tensor, w0: torch.Tensor, w_prev: torch.Tensor) -> dict:
    return {
        "weight_mean": float(w.mean()), "weight_std": float(w.std(unbiased=False)),
        "weight_neg_frac": float((w < 0).double().mean()),
        "drift_z": float((w - w0).abs().mean() / w0.std(unbiased=False)),
        "dist_from_init": float((w - w0).norm()), "update_norm": float((w - w_prev).norm()),
    }


def lookup(df, step: int, layer: str, metric: str) -> float:
    rows = df[(df.step == step) & (df.layer == layer) & (df.metric == metric)]
    assert len(rows) == 1, (step, layer, metric, len(rows))
    return float(rows.value.iloc[0])


@pytest.mark.parametrize("passes", [1, 2])
def test_every_metric_matches_brute_force(passes: int) -> None:
    model = make_tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.3, momentum=0.9)
    probe = actlab.Probe(model, every=1, blocks=[model.fc2])
    gen = torch.Generator().manual_seed(1)
    w0 = {n: m.weight.detach().clone() for n, m in (("fc1", model.fc1), ("fc2", model.fc2),
                                                   ("head", model.head))}
    w_prev = copy.deepcopy(w0)
    expected = {}
    for step in range(3):
        # leading dims (4, 3): rows are batch x position, as in a sequence model
        xs = [torch.randn(4, 3, 5, generator=gen, dtype=torch.float64) for _ in range(passes)]
        ys = [torch.randn(4, 3, 3, generator=gen, dtype=torch.float64) for _ in range(passes)]
        expected[step] = brute_force(model, xs, ys)
        for name, w in w0.items():
            current = getattr(model, name).weight.detach()
            expected[step][name].update(weight_brute(current, w, w_prev[name]))
            w_prev[name] = current.clone()
        loss = sum(((model(x) - y) ** 2).mean() for x, y in zip(xs, ys))
        loss.backward()
        opt.step()
        opt.zero_grad()
        probe.step()
    df = probe.table()
    probe.close()
    assert list(df.columns) == ["step", "layer", "metric", "value"]
    checked = 0
    for step, layers in expected.items():
        for layer, metrics in layers.items():
            for metric, value in metrics.items():
                got = lookup(df, step, layer, metric)
                assert got == pytest.approx(value, rel=1e-9, abs=1e-12), (step, layer, metric)
                checked += 1
    assert checked == 3 * (2 * 11 + 1 + 1 + 3 * 8)
    # the training moved something, so the weight metrics above were not all trivially zero
    assert lookup(df, 2, "fc1", "drift_z") > 0
    assert 0 < lookup(df, 1, "act2", "saturation_frac") < 1
    assert 0 < lookup(df, 1, "act1", "sparsity") < 1
    # relu has no saturation row; every row is finite
    assert df[(df.layer == "act1") & (df.metric == "saturation_frac")].empty
    assert df.value.notna().all()


def test_preact_grad_cov_is_the_covariance_part_of_the_weight_gradient() -> None:
    """mean(dL/dW) = rows * (mean_i E[g_i] * mean_k E[x_k] + preact_grad_cov)."""
    model = make_tiny(3)
    probe = actlab.Probe(model, metrics=["preact_grad_cov", "preact_grad_mean"])
    x = torch.randn(16, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    model(x).pow(2).sum().backward()
    probe.step()
    df = probe.table()
    probe.close()
    rows = 16
    x_in = x
    g_mean = lookup(df, 0, "act1", "preact_grad_mean")
    cov = lookup(df, 0, "act1", "preact_grad_cov")
    lhs = float(model.fc1.weight.grad.mean())
    assert lhs == pytest.approx(rows * (g_mean * float(x_in.mean()) + cov), rel=1e-10)
    assert set(df.metric) == {"preact_grad_cov", "preact_grad_mean"}


class SharedAct(nn.Module):
    """One activation module called after Linears of different widths (6 -> 4 and 4 -> 4)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2, self.act = nn.Linear(6, 4), nn.Linear(4, 4), nn.Tanh()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.fc2(self.act(self.fc1(x))))


def test_preact_grad_cov_pools_row_means_over_the_passes_of_a_shared_module() -> None:
    """Dense reference: the covariance over all rows of both passes of the pairs
    (mean_i g_ni, mean_k x_nk), each pass with its own feeding Linear's input."""
    torch.manual_seed(0)
    model = SharedAct().double()
    x = torch.randn(9, 6, dtype=torch.float64)
    probe = actlab.Probe(model, metrics=["preact_grad_cov", "preact_grad_mean"])
    model(x).pow(3).sum().backward()
    probe.step()
    df = probe.table()
    probe.close()
    # the reference, with autograd on explicit intermediates
    p1 = model.fc1(x)
    p1.retain_grad()
    h = torch.tanh(p1)
    p2 = model.fc2(h)
    p2.retain_grad()
    torch.tanh(p2).pow(3).sum().backward()
    g_rows = torch.cat([p1.grad.mean(1), p2.grad.mean(1)])
    x_rows = torch.cat([x.mean(1), h.detach().mean(1)])
    cov = ((g_rows - g_rows.mean()) * (x_rows - x_rows.mean())).mean()
    assert lookup(df, 0, "act", "preact_grad_cov") == pytest.approx(float(cov), rel=1e-10)
    g_mean = torch.cat([p1.grad.reshape(-1), p2.grad.reshape(-1)]).mean()
    assert lookup(df, 0, "act", "preact_grad_mean") == pytest.approx(float(g_mean), rel=1e-10)


def test_dead_units_exact_and_per_batch_on_constructed_model() -> None:
    model = nn.Sequential(nn.Linear(3, 6), nn.ReLU(), nn.Linear(6, 1))
    with torch.no_grad():
        model[0].weight.zero_()
        model[0].bias.copy_(torch.tensor([-1.0, -1.0, -0.5, 1.0, 1.0, 1.0]))
        model[0].weight[2, 0] = 1.0  # unit 2 fires only when x0 > 0.5
    batches = [torch.zeros(5, 3) for _ in range(4)]
    batches[2][1, 0] = 1.0  # the only example that wakes unit 2
    probe = actlab.Probe(model, every=[1000])
    dead = probe.dead_units([(b, torch.zeros(5)) for b in batches])
    probe.close()
    row = dead.set_index("layer").loc["1"]
    assert row.units == 6 and row.batches == 4
    assert row.dead_frac == pytest.approx(2 / 6)
    # three batches see 3 of 6 silent, one sees 2 of 6
    assert row.dead_frac_per_batch == pytest.approx((3 * 3 / 6 + 2 / 6) / 4)
    assert row.dead_frac_per_batch > row.dead_frac


def test_dead_units_counts_channels_after_conv() -> None:
    model = nn.Sequential(nn.Conv2d(1, 3, 1), nn.BatchNorm2d(3), nn.ReLU())
    with torch.no_grad():
        model[0].weight.fill_(1.0)
        model[1].weight.fill_(1.0)
        model[1].bias.copy_(torch.tensor([-100.0, 0.0, 0.0]))
    model.eval()
    probe = actlab.Probe(model, every=[1000])
    dead = probe.dead_units([torch.randn(2, 1, 4, 4) for _ in range(3)])
    probe.close()
    row = dead.set_index("layer").loc["2"]
    assert row.units == 3 and row.dead_frac == pytest.approx(1 / 3)


def hooks_of(model: nn.Module) -> list:
    found = []
    for module in model.modules():
        found += list(module._forward_hooks.values()) + list(module._forward_pre_hooks.values())
        found += list(module._backward_hooks.values())
        found += list(getattr(module, "_backward_pre_hooks", {}).values())
    for param in model.parameters():
        found += list((getattr(param, "_post_accumulate_grad_hooks", None) or {}).values())
        found += list((param._backward_hooks or {}).values())
    return found


def train(model: nn.Module, steps: int, probe_kwargs: dict | None) -> tuple:
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    probe = actlab.Probe(model, **probe_kwargs) if probe_kwargs is not None else None
    gen = torch.Generator().manual_seed(5)
    for _ in range(steps):
        x = torch.randn(8, 5, generator=gen, dtype=torch.float64)
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        if probe is not None:
            probe.step()
    return probe


def test_close_removes_every_hook_and_model_is_bit_identical() -> None:
    probed, plain = make_tiny(7), make_tiny(7)
    kwargs = {"every": 1, "blocks": ["fc2"], "histograms": 8}
    probe = train(probed, 4, kwargs)
    train(plain, 4, None)
    assert hooks_of(probed)  # hooks were really there while probing
    probe.close()
    assert hooks_of(probed) == []
    # the probe did not change training: same weights, bit for bit
    for a, b in zip(probed.state_dict().values(), plain.state_dict().values()):
        assert torch.equal(a, b)
    x = torch.randn(6, 5, dtype=torch.float64)
    out_a, out_b = probed(x), plain(x)
    assert torch.equal(out_a, out_b)
    grads_a = torch.autograd.grad(out_a.pow(3).sum(), list(probed.parameters()))
    grads_b = torch.autograd.grad(out_b.pow(3).sum(), list(plain.parameters()))
    assert all(torch.equal(a, b) for a, b in zip(grads_a, grads_b))
    assert not probe.table().empty  # records survive close()


def test_hooks_stay_for_the_probes_life_and_record_only_scheduled_steps() -> None:
    """Hooks that came and went with the schedule would be missing from (or recompile) a
    graph compiled on an unrecorded step; on those steps they return at once."""
    model = make_tiny()
    probe = actlab.Probe(model, every=[1, 3])
    seen = []
    for _ in range(5):
        seen.append(bool(hooks_of(model)))
        model(torch.randn(2, 5, dtype=torch.float64)).sum().backward()
        probe.step()
    assert seen == [True] * 5
    df = probe.table()
    probe.close()
    assert hooks_of(model) == []
    assert set(df.step) == {1, 3}


def test_inplace_activation_reads_input_before_it_is_overwritten() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(inplace=True), nn.Linear(8, 2)).double()
    probe = actlab.Probe(model, metrics=["preact_neg_frac", "preact_mean", "act_mean",
                                          "preact_grad_mean"])
    x = torch.randn(10, 4, dtype=torch.float64)
    p = model[0](x).detach()
    model(x).sum().backward()
    probe.step()
    df = probe.table()
    probe.close()
    assert lookup(df, 0, "1", "preact_neg_frac") == pytest.approx(float((p < 0).double().mean()))
    assert lookup(df, 0, "1", "preact_mean") == pytest.approx(float(p.mean()))
    assert lookup(df, 0, "1", "act_mean") == pytest.approx(float(p.clamp_min(0).mean()))
    # dL/dp of sum(W2 relu(p)) is W2 summed over outputs, masked by p > 0
    g_brute = (p > 0).double() * model[2].weight.detach().sum(0)
    assert lookup(df, 0, "1", "preact_grad_mean") == pytest.approx(float(g_brute.mean()))


def test_histograms_match_torch_histc_with_edge_clamping() -> None:
    model = make_tiny()
    probe = actlab.Probe(model, histograms=6, hist_range=(-1.0, 1.0), metrics=["act_mean"])
    x = torch.randn(20, 5, dtype=torch.float64)
    model(x)
    probe.step()
    hist = probe.histograms()
    probe.close()
    p = model.fc1(x).detach()
    edges = torch.linspace(-1, 1, 7, dtype=torch.float64)
    idx = torch.bucketize(p.clamp(-1, 1).reshape(-1), edges[1:-1], right=True)
    expected = torch.bincount(idx, minlength=6).double()
    got = hist[(hist.layer == "act1") & (hist.kind == "pre")].sort_values("bin_left")["count"]
    assert torch.equal(torch.tensor(got.to_numpy()), expected)
    assert float(expected.sum()) == p.numel()


def test_schedules() -> None:
    assert Every(3).steps(10) == [0, 3, 6, 9]
    assert LogSpaced(10).steps(30) == [0, 1, 2, 3, 5, 6, 7, 10, 12, 15, 19, 25]
    assert as_schedule([4, 2]).steps(6) == [2, 4]
    assert isinstance(as_schedule("log:5"), LogSpaced) and isinstance(as_schedule(2), Every)
    assert isinstance(as_schedule(AtSteps(frozenset({1}))), AtSteps)
    for bad in (0, -1, "lin", [-2], 1.5):
        with pytest.raises(ConfigError):
            as_schedule(bad)


def test_bad_names_raise_with_closest_valid() -> None:
    model = make_tiny()
    with pytest.raises(ValueError, match="preact_mean"):
        actlab.Probe(model, metrics=["preact_mena"])
    with pytest.raises(ValueError, match="act1"):
        actlab.Probe(model, activations=["act_1"])
    with pytest.raises(ValueError, match="fc2"):
        actlab.Probe(model, blocks=["fc_2"])


def test_selection_by_predicate_and_log_schedule_rows() -> None:
    model = make_tiny()
    probe = actlab.Probe(model, every="log", weights=False,
                         activations=lambda name, m: isinstance(m, nn.Tanh))
    for _ in range(12):
        model(torch.randn(3, 5, dtype=torch.float64)).sum().backward()
        probe.step()
    df = probe.table()
    probe.close()
    assert set(df.layer) == {"act2"}
    assert sorted(set(df.step)) == [0, 1, 2, 3, 5, 6, 7, 10]


def test_actlab_residual_mlp_against_its_own_statistics() -> None:
    """actlab's residual MLP reports hidden and post-activation means itself; the probe,
    hooking its blocks (which return tuples) and its shifted activations, must agree."""
    from actlab.nn.residual_mlp import ResidualMLP

    model = ResidualMLP(6, 12, 3, activation="relu:shift=theory",
                        generator=torch.Generator().manual_seed(0)).double()
    assert list(actlab.find_activations(model)) == [f"blocks.{i}.act" for i in range(3)]
    probe = actlab.Probe(model, blocks=model.blocks, metrics=["hidden_mean", "act_mean",
                                                              "preact_grad_cov"])
    x = torch.randn(10, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    out, stats = model(x, return_stats=True)
    out.pow(2).mean().backward()
    probe.step()
    df = probe.table()
    probe.close()
    for i in range(3):
        assert lookup(df, 0, f"blocks.{i}", "hidden_mean") == pytest.approx(
            float(stats["hidden_mean"][i].detach()), rel=1e-12)
        assert lookup(df, 0, f"blocks.{i}.act", "act_mean") == pytest.approx(
            float(stats["post_act_mean"][i].detach()), rel=1e-12)
        assert np.isfinite(lookup(df, 0, f"blocks.{i}.act", "preact_grad_cov"))
