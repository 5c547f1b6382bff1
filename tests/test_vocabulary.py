"""One vocabulary across the public API: ``activations=`` (the modules measured),
``input_modules=`` (the modules whose input is read), ``batches`` (the data).

The old keywords (``sites=``, ``inputs=``, ``modules=``) still work for one release: each
gives a ``DeprecationWarning`` that names the new keyword, points at the caller, and the
call returns exactly what the new keyword gives.
"""

from __future__ import annotations

import warnings

import pandas as pd
import pytest
import torch
from torch import nn

import actlab
from actlab.errors import renamed_keywords
from actlab.profile import layer_profile
from actlab.recipes.language_model import probe_forward

METRICS = ("act_mean", "sparsity", "preact_neg_frac", "down_input_range", "hidden_mean")


def _mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 8), nn.GELU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3))


def _batches() -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    return [torch.randn(6, 5, generator=gen) for _ in range(3)]


def _quiet(call):
    """``call()`` with any warning an error: the new names never warn."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return call()


def _renamed(call, old: str, new: str):
    """``call()`` under ``pytest.warns``: one DeprecationWarning naming ``old`` and ``new``,
    reported at this file (the caller), not inside actlab."""
    with pytest.warns(DeprecationWarning) as record:
        out = call()
    messages = [str(w.message) for w in record if w.category is DeprecationWarning]
    assert any(f"{old}= is renamed {new}=" in m for m in messages), messages
    assert all(w.filename == __file__ for w in record if w.category is DeprecationWarning)
    return out


def test_the_helper_maps_the_old_keyword_and_refuses_both() -> None:
    @renamed_keywords(old="new")
    def f(*, new: int = 0) -> int:
        return new

    assert _renamed(lambda: f(old=3), "old", "new") == 3
    assert _quiet(lambda: f(new=4)) == 4
    with pytest.raises(TypeError, match="pass new= only"):
        f(old=1, new=2)

    class Thing:
        @renamed_keywords(a="b")
        def __init__(self, *, b: int = 0) -> None:
            self.b = b

    with pytest.warns(DeprecationWarning, match=r"^Thing\(\): the keyword a= is renamed b="):
        assert Thing(a=5).b == 5


def _probe_table(**kwargs) -> tuple[pd.DataFrame, pd.DataFrame]:
    model = _mlp()
    probe = actlab.Probe(model, every=1, metrics=METRICS, blocks=["2"], histograms=4, **kwargs)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x in _batches():
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        probe.step()
    table, hist = probe.table(), probe.histograms()
    probe.close()
    return table, hist


def test_probe_input_modules_and_the_old_inputs() -> None:
    new = _quiet(lambda: _probe_table(input_modules=["4"]))
    old = _renamed(lambda: _probe_table(inputs=["4"]), "inputs", "input_modules")
    assert "down_input_range" in set(new[0]["metric"])
    pd.testing.assert_frame_equal(new[0], old[0])
    pd.testing.assert_frame_equal(new[1], old[1])


def test_measure_once_batches_and_input_modules() -> None:
    def run(**kwargs) -> pd.DataFrame:
        return actlab.measure_once(_mlp(), metrics=METRICS, blocks=["2"], **kwargs)

    positional = actlab.measure_once(_mlp(), _batches(), metrics=METRICS, blocks=["2"],
                                     input_modules=["4"])
    new = _quiet(lambda: run(batches=_batches(), input_modules=["4"]))
    old_batches = _renamed(lambda: run(inputs=_batches(), input_modules=["4"]), "inputs",
                           "batches")
    old_modules = _renamed(lambda: run(batches=_batches(), modules=["4"]), "modules",
                           "input_modules")
    assert ("4", "down_input_range") in set(zip(new["layer"], new["metric"]))
    for other in (positional, old_batches, old_modules):
        pd.testing.assert_frame_equal(new, other)


def test_probe_forward_batches_and_input_modules() -> None:
    new = _quiet(lambda: probe_forward(_mlp(), batches=_batches(), metrics=METRICS,
                                       input_modules=["4"]))
    old = _renamed(lambda: probe_forward(_mlp(), inputs=_batches(), metrics=METRICS,
                                         input_modules=["4"]), "inputs", "batches")
    old_modules = _renamed(lambda: probe_forward(_mlp(), _batches(), metrics=METRICS,
                                                 modules=["4"]), "modules", "input_modules")
    pd.testing.assert_frame_equal(new, old)
    pd.testing.assert_frame_equal(new, old_modules)


def test_profile_model_activations_and_batches() -> None:
    new = _quiet(lambda: actlab.profile_model(_mlp(), batches=_batches(), activations=["3"]))
    old_sites = _renamed(lambda: actlab.profile_model(_mlp(), _batches(), sites=["3"]),
                         "sites", "activations")
    old_inputs = _renamed(lambda: actlab.profile_model(_mlp(), inputs=_batches(),
                                                       activations=["3"]), "inputs", "batches")
    assert set(new.table()["layer"]) >= {"3"} and "1" not in set(new.table()["layer"])
    for other in (old_sites, old_inputs):
        pd.testing.assert_frame_equal(new.table(), other.table())
        assert other.n_inputs == new.n_inputs == 3


def test_layer_profile_batches() -> None:
    new = _quiet(lambda: layer_profile(_mlp(), batches=_batches()))
    old = _renamed(lambda: layer_profile(_mlp(), inputs=_batches()), "inputs", "batches")
    assert new == old and new


@pytest.mark.parametrize("framework", ["transformers", "lightning"])
def test_probe_callback_activations_and_the_old_sites(framework: str) -> None:
    pytest.importorskip("transformers" if framework == "transformers" else "lightning")
    if framework == "transformers":
        from actlab.integrations.transformers import ProbeCallback
    else:
        from actlab.integrations.lightning import ProbeCallback

    sites = ["blocks.*.mlp.act"]
    new = _quiet(lambda: ProbeCallback(every=5, activations=sites))
    old = _renamed(lambda: ProbeCallback(every=5, sites=sites), "sites", "activations")
    positional = _quiet(lambda: ProbeCallback(5, None, sites))
    for callback in (new, old, positional):
        assert callback.session.activations is sites and callback.session.every == 5
    # the sites reach the probe: it measures only those
    model = _mlp()
    callback = ProbeCallback(every=1, activations=["3"], metrics=["act_mean"])
    callback.session.begin(model)
    try:
        assert [site.name for site in callback.session.probe.sites] == ["3"]
    finally:
        callback.session.probe.close()
