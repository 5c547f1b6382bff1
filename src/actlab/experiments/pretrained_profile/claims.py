"""The claims of the ``pretrained-profile`` experiment, read from its summary."""

from __future__ import annotations

import numpy as np

from actlab.runner.claims import claim_id
from actlab.runner.experiment import Claim

NAME = "pretrained-profile"
SOURCE = "seed 003 App. B.3.2"
SPIKE_RATIO = 4.0  # vision models stay below 4x the median; BERT-base/GPT-2 reach 9-12x


def claims(summary: dict) -> list[Claim]:
    """Spike ratio of language models, where the spike sits, share of negative pre-activations."""
    ratio = summary["range_max_over_median"]
    n = len(summary["layers"])
    neg = summary["mean_preact_neg_frac"]
    return [
        Claim(f"language models show a spike layer: max/median of the down-projection input "
              f"range > {SPIKE_RATIO:g} (BERT-base, GPT-2: 9-12x)",
              f"{ratio:.2f}x (layer {summary['range_max_layer']} of {n})",
              bool(np.isfinite(ratio) and ratio > SPIKE_RATIO), SOURCE,
              id=claim_id(NAME, "model", "spike-layer"), value=ratio, comparison=">",
              threshold=SPIKE_RATIO),
        Claim("the spike is in an early layer (first half)",
              f"largest range at layer {summary['range_max_layer']} of {n}",
              bool(summary["range_max_layer"] < n / 2), "seed 003 §6, App. B.3",
              id=claim_id(NAME, "model", "spike-in-early-layer"),
              value=summary["range_max_layer"], comparison="<", threshold=n / 2),
        Claim("most MLP pre-activations are negative (60-80% in the seed's trained models)",
              f"mean share over layers {neg:.3f}", bool(0.6 <= neg <= 0.8), "seed 003 §3, Table 1",
              id=claim_id(NAME, "model", "most-preactivations-negative"), value=neg,
              comparison="compound", threshold=0.6),
    ]

