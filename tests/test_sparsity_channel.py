"""``sparsity``'s structured Top-K points (``topk-channel``): units, the model they build, the
summary pairs and the claims' direction on hand-made points."""

from __future__ import annotations

import pytest

from actlab.experiments.sparsity import Sparsity, SparsityConfig, point_model_args
from actlab.experiments.sparsity.channel import channel_summary
from actlab.experiments.sparsity.claims import channel_claims


def point(method: str, level: float, accuracy: float, sparsity: float) -> dict:
    return {"model": "resnet", "method": method, "level": level, "accuracy": accuracy,
            "sparsity": sparsity, "neg_frac": 0.5}


def test_units_only_on_models_with_channel_maps():
    exp = Sparsity()
    units = exp.units(SparsityConfig(models=["mlp", "resnet"], channel_levels=[0.5, 0.05]))
    chan = [u for u in units if u["method"] == "topk-channel"]
    assert chan == [{"model": "resnet", "method": "topk-channel", "level": 0.5},
                    {"model": "resnet", "method": "topk-channel", "level": 0.05}]
    assert not [u for u in exp.units(SparsityConfig(models=["mlp", "vit"]))
                if u["method"] == "topk-channel"]
    assert point_model_args("topk-channel", 0.05)["activation"] == "gelu:topk=0.05:channel"


def test_summary_pairs_levels_both_methods_ran():
    points = [point("topk", 0.5, 0.98, 0.5), point("topk", 0.05, 0.90, 0.9),
              point("topk-channel", 0.5, 0.97, 0.5), point("topk-channel", 0.05, 0.60, 0.9),
              point("topk-channel", 0.2, 0.95, 0.8)]
    out = channel_summary(points)["resnet"]
    assert [p["level"] for p in out["points"]] == [0.5, 0.2, 0.05]
    assert [p["level"] for p in out["pairs"]] == [0.5, 0.05]
    assert out["pairs"][1]["difference"] == pytest.approx(0.90 - 0.60)
    assert channel_summary([point("topk", 0.5, 0.9, 0.5)]) is None


@pytest.mark.parametrize(("chan_acc", "held"), [(0.60, True), (0.95, False)])
def test_claims_follow_the_measurement(chan_acc, held):
    points = [point("topk", 0.5, 0.98, 0.5), point("topk", 0.05, 0.92, 0.9),
              point("topk-channel", 0.5, 0.97, 0.5),
              point("topk-channel", 0.05, chan_acc, 0.9)]
    specs = {s.id: s.judge() for s in channel_claims(channel_summary(points))}
    assert set(specs) == {"sparsity/resnet-topk-channel/heavier-penalty",
                          "sparsity/resnet-topk-channel/degrades-at-sparsest"}
    for claim in specs.values():
        assert claim.held is held
