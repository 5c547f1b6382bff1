"""The probe on a ``torch.compile`` model (CPU inductor) against the same run in eager mode.

One compiled run and one eager run of the same float64 model on the same batches are shared
by the whole file (compiling is the slow part). Recompiles and graphs are counted by
dynamo's own ``CompileCounterWithBackend``, graph breaks by ``torch._dynamo.utils.counters``:
recording every 10 steps changes a device-side flag, not the graph. The other ways a model
comes to run compiled are in ``tests/test_probe_compile_cases.py``.
"""

from __future__ import annotations

import copy
import warnings

import pandas as pd
import pytest
import torch
from torch import nn

import actlab
from actlab.probe.metrics import ACT_KURTOSIS, ACT_OUTPUT_GRAD, ALL_METRICS
from actlab.probe.names import layer_name, unwrapped_modules

pytestmark = pytest.mark.xdist_group("processes")  # inductor's compile workers (conftest.py)

STEPS, EVERY = 30, 10
SITE_BACKWARD = {"preact_grad_mean", "preact_grad_cov"}  # from GradTap when compiled


class Net(nn.Module):
    """actlab activations (one called twice per forward), a foreign bounded one and an
    in-place foreign one."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(6, 16)
        self.fc1b = nn.Linear(16, 16)
        self.act1 = actlab.activation("relu")
        self.fc2 = nn.Linear(16, 16)
        self.act2 = actlab.activation("gelu:shift=0.1")
        self.fc3 = nn.Linear(16, 8)
        self.act3 = nn.Tanh()
        self.fc4 = nn.Linear(8, 8)
        self.act4 = nn.ReLU(inplace=True)
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act1(self.fc1b(self.act1(self.fc1(x))))  # act1: two passes per call
        h = self.act2(self.fc2(h))
        return self.head(self.act4(self.fc4(self.act3(self.fc3(h)))))


def train(model: nn.Module) -> dict:
    """30 SGD steps of two micro-batches each, recording every 10th step."""
    gen = torch.Generator().manual_seed(1)
    batches = [(torch.randn(2, 8, 6, generator=gen, dtype=torch.float64),
                torch.randn(2, 8, 3, generator=gen, dtype=torch.float64)) for _ in range(STEPS)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # the default set and the opt-in kurtosis (the output-gradient family is eager-only)
        probe = actlab.Probe(model, every=EVERY, blocks=["fc2"], histograms=8,
                             metrics=ALL_METRICS + ACT_KURTOSIS)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for xs, ys in batches:
        for x, y in zip(xs, ys):  # two forward/backward passes pooled in one step
            ((model(x) - y) ** 2).mean().backward()
        opt.step()
        opt.zero_grad()
        probe.step()
    out = {"table": probe.table(), "hist": probe.histograms(), "warnings": caught,
           "sites": [s.name for s in probe.sites]}
    probe.close()
    return out


@pytest.fixture(scope="module")
def runs() -> dict:
    from torch._dynamo.testing import CompileCounterWithBackend
    from torch._dynamo.utils import counters

    torch.manual_seed(0)
    base = Net().double()
    eager = train(copy.deepcopy(base))
    torch._dynamo.reset()
    counters.clear()
    counter = CompileCounterWithBackend("inductor")
    compiled_model = torch.compile(copy.deepcopy(base), backend=counter)
    compiled = train(compiled_model)
    # frames dynamo compiled (a recompile counts again); not the backend's calls, which also
    # count the restart dynamo makes within one compile for the model's Python floats
    compiled["frames"] = counters["frames"]["total"]
    # inductor hands the backend one empty graph of its own on first use: not the model's
    compiled["graphs"] = sum(1 for g in counter.graphs if len(g.graph.nodes))
    compiled["graph_breaks"] = dict(counters["graph_break"])
    compiled["unique_graphs"] = counters["stats"]["unique_graphs"]
    return {"eager": eager, "compiled": compiled}


@pytest.mark.slow
def test_compiled_metrics_equal_eager(runs: dict) -> None:
    eager, compiled = runs["eager"]["table"], runs["compiled"]["table"]
    assert set(eager.metric) == set(compiled.metric)
    assert SITE_BACKWARD <= set(compiled.metric)
    # every site has both backward metrics on every recorded step (act3 and act4 are fed by
    # a Linear too, so the covariance term is defined everywhere)
    backward = compiled[compiled.metric.isin(SITE_BACKWARD)]
    assert len(backward) == len(range(0, STEPS, EVERY)) * 4 * 2
    expected = eager
    key = ["step", "layer", "metric"]
    merged = expected.merge(compiled, on=key, how="outer", suffixes=("_eager", "_compiled"),
                            indicator=True)
    assert (merged["_merge"] == "both").all(), merged[merged["_merge"] != "both"]
    # activation rows only on recorded steps (the final weights add step 30's weight rows)
    sites = compiled[compiled.layer.str.startswith("act")]
    assert sorted(set(sites.step)) == list(range(0, STEPS, EVERY))
    # float64 throughout: inductor's reordered sums differ from eager's by a few ulps per
    # operation, far below 1e-9 relative even after 30 training steps
    for row in merged.itertuples():
        assert row.value_compiled == pytest.approx(row.value_eager, rel=1e-9, abs=1e-12), row


@pytest.mark.slow
def test_compiled_histograms_equal_eager(runs: dict) -> None:
    eager, compiled = runs["eager"]["hist"], runs["compiled"]["hist"]
    assert len(eager) and len(compiled) == len(eager)
    pd.testing.assert_frame_equal(compiled.reset_index(drop=True), eager.reset_index(drop=True))


@pytest.mark.slow
def test_one_graph_no_recompiles_no_graph_breaks(runs: dict) -> None:
    compiled = runs["compiled"]
    assert compiled["frames"] == 1  # compiled once: recorded and unrecorded steps alike
    assert compiled["graphs"] == 1
    assert compiled["unique_graphs"] == 1
    assert compiled["graph_breaks"] == {}


@pytest.mark.slow
def test_layer_names_as_in_the_unwrapped_model(runs: dict) -> None:
    assert runs["compiled"]["sites"] == runs["eager"]["sites"] == ["act1", "act2", "act3",
                                                                  "act4"]
    assert not runs["compiled"]["table"].layer.str.contains("_orig_mod").any()


@pytest.mark.slow
def test_compiled_probe_records_everything_without_warnings(runs: dict) -> None:
    assert not [str(w.message) for w in runs["compiled"]["warnings"]]
    assert not runs["eager"]["warnings"]


def test_registered_gradient_metric_is_refused_on_a_compiled_model_with_a_warning() -> None:
    from actlab.probe.collectors import Collector, unregister_metric

    class GradPeak(Collector):
        metrics, target = ("g_peak",), "grad"

        def observe(self, where, g, x_rows, fan):
            return g.detach().abs().amax(), None

        def combine(self, where, raw, meta):
            return {"g_peak": float(raw.max())}

    actlab.register_metric(GradPeak())
    try:
        model = torch.compile(nn.Sequential(nn.Linear(3, 4), nn.ReLU()), backend="eager")
        with pytest.warns(UserWarning, match="g_peak"):
            probe = actlab.Probe(model, metrics=["g_peak", "preact_grad_mean"])
        assert [type(c).__name__ for c in probe._grad_collectors] == ["ActivationBackward"]
        probe.close()
    finally:
        unregister_metric("g_peak")


def test_output_gradient_metrics_are_left_out_on_a_compiled_model_with_a_warning() -> None:
    model = torch.compile(nn.Sequential(nn.Linear(3, 4), nn.ReLU()), backend="eager")
    with pytest.warns(UserWarning, match="act_grad_rms"):
        probe = actlab.Probe(model, metrics=["act_mean", *ACT_OUTPUT_GRAD])
    model(torch.randn(2, 3)).sum().backward()
    probe.step()
    assert set(probe.table().metric) == {"act_mean"}
    probe.close()


def test_layer_name_strips_wrapper_segments() -> None:
    assert layer_name("_orig_mod.module.blocks.0.mlp") == "blocks.0.mlp"
    assert layer_name("blocks.0._orig_mod.mlp.act") == "blocks.0.mlp.act"
    assert layer_name("module.module.fc") == "fc"
    assert layer_name("module.fc", strip_module=False) == "module.fc"
    assert layer_name("enc.module.fc") == "enc.module.fc"  # only DDP's leading segment


def test_unwrapped_modules_keeps_a_child_called_module() -> None:
    model = nn.Sequential()
    model.add_module("module", nn.Linear(2, 2))
    assert list(unwrapped_modules(model)) == ["", "module"]
    wrapped = torch.compile(model, backend="eager")
    named = unwrapped_modules(wrapped)
    assert named["module"] is model.module and named[""] is model


def test_compiled_shared_module_and_merged_backward() -> None:
    """A module called twice in one compiled forward keeps both passes (carrier rows), equal
    to eager; two compiled calls before one backward share rows: left out with a warning."""
    from test_probe import SharedAct, lookup

    torch.manual_seed(0)
    base = SharedAct().double()
    x = torch.randn(9, 6, dtype=torch.float64)
    tables = {}
    for mode in ("eager", "compiled"):
        model = copy.deepcopy(base)
        model = torch.compile(model, backend="aot_eager") if mode == "compiled" else model
        probe = actlab.Probe(model, metrics=sorted(SITE_BACKWARD))
        model(x).pow(3).sum().backward()
        probe.step()
        tables[mode] = probe.table()
        probe.close()
    for metric in SITE_BACKWARD:
        assert lookup(tables["compiled"], 0, "act", metric) == pytest.approx(
            lookup(tables["eager"], 0, "act", metric), rel=1e-12)

    model = torch.compile(copy.deepcopy(base), backend="aot_eager")
    probe = actlab.Probe(model, metrics=sorted(SITE_BACKWARD))
    (model(x).sum() + model(2 * x).sum()).backward()
    probe.step()
    with pytest.warns(UserWarning, match="summed several forward calls"):
        table = probe.table()
    probe.close()
    assert table.value.isna().all() or table.empty
