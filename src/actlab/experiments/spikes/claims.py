"""The claims of the ``spikes`` experiment (§6 / Table 6), read from its summary."""

from __future__ import annotations

import numpy as np

from actlab.runner.claims import claim_id
from actlab.runner.experiment import Claim

NAME = "spikes"
SOURCE = "seed 003 §6, App. B.3.1"
SPIKE_FACTOR = 4.0  # Table 2: ReLU2 amplifies the layer-2 spike 4-25x over ReLU and GELU
LOSS_TOLERANCE = 0.01  # "without degrading performance": clip50 within 0.01 nats of relu2


def claims(summary: dict) -> list[Claim]:
    """The claims of §6 / Table 6, each decided by the thresholds stated in the text."""
    acts = summary["activations"]
    out: list[Claim] = []

    def largest(spec: str) -> float:
        return acts[spec]["largest_range"] if spec in acts else float("nan")

    def loss(spec: str) -> float:
        return acts[spec]["val_loss"]["mean"] if spec in acts else float("nan")

    base = max(largest("relu"), largest("gelu"))
    if np.isfinite(base) and np.isfinite(largest("relu2")):
        factor = largest("relu2") / base
        out.append(Claim(f"relu2 amplifies spikes >= {SPIKE_FACTOR:g}x over relu and gelu "
                         "(largest down-projection input range)",
                         f"relu2 {largest('relu2'):.1f} vs max(relu, gelu) {base:.1f} "
                         f"({factor:.2f}x)", bool(factor >= SPIKE_FACTOR), SOURCE,
                         id=claim_id(NAME, "relu2", "amplifies-spikes"), value=factor,
                         comparison=">=", threshold=SPIKE_FACTOR))
    if np.isfinite(largest("relu2:clip=50")) and np.isfinite(largest("relu2")):
        spiked = largest("relu2") > 50
        out.append(Claim("clipping relu2 at 50 removes the spikes",
                         f"clip50 {largest('relu2:clip=50'):.1f} vs relu2 {largest('relu2'):.1f}"
                         + ("" if spiked else " (relu2 never exceeded 50: nothing to remove)"),
                         bool(largest("relu2:clip=50") < largest("relu2")) if spiked else None,
                         SOURCE, id=claim_id(NAME, "relu2-clip50", "removes-spikes"),
                         value=largest("relu2:clip=50"), comparison="<",
                         threshold=largest("relu2")))
    # A clip that never engages leaves training unchanged: nothing to compare then.
    engaged = {c: largest("relu2") > c for c in (15, 50)}
    if np.isfinite(loss("relu2:clip=50")) and np.isfinite(loss("relu2")):
        gap = loss("relu2:clip=50") - loss("relu2")
        out.append(Claim(f"relu2:clip=50 does not degrade the loss (within {LOSS_TOLERANCE} nats)",
                         f"clip50 - relu2 = {gap:+.4f}" + ("" if engaged[50] else
                                                           " (clip at 50 never engaged)"),
                         bool(gap <= LOSS_TOLERANCE) if engaged[50] else None, SOURCE,
                         id=claim_id(NAME, "relu2-clip50", "loss-not-degraded"),
                         value=gap, comparison="<=", threshold=LOSS_TOLERANCE))
    if np.isfinite(loss("relu2:clip=15")) and np.isfinite(loss("relu2:clip=50")):
        out.append(Claim("clipping at 15 degrades the loss relative to clipping at 50",
                         f"clip15 {loss('relu2:clip=15'):.4f} vs clip50 {loss('relu2:clip=50'):.4f}"
                         + ("" if engaged[15] else " (clip at 15 never engaged)"),
                         bool(loss("relu2:clip=15") > loss("relu2:clip=50")) if engaged[15]
                         else None, SOURCE,
                         id=claim_id(NAME, "relu2-clip15", "loss-degraded"),
                         value=loss("relu2:clip=15"), comparison=">",
                         threshold=loss("relu2:clip=50")))
    squared = min(loss("relu2"), loss("gelu2"))
    plain = min(loss("relu"), loss("gelu"))
    if np.isfinite(squared) and np.isfinite(plain):
        out.append(Claim("squared activations reach a lower loss than relu and gelu",
                         f"best squared {squared:.4f} vs best plain {plain:.4f}",
                         bool(squared < plain), "seed 003 App. B.3.1, Fig. 16",
                         id=claim_id(NAME, "squared", "lower-loss"), value=squared,
                         comparison="<", threshold=plain))
    if "relu2" in acts and "relu2:clip=50" in acts:
        sd_clip, sd_sq = acts["relu2:clip=50"]["val_loss"]["sd"], acts["relu2"]["val_loss"]["sd"]
        decidable = engaged[50] and np.isfinite(sd_clip) and np.isfinite(sd_sq)
        out.append(Claim("relu2:clip=50 varies less across seeds than relu2",
                         f"sd {sd_clip:.4f} vs {sd_sq:.4f}" + ("" if engaged[50] else
                                                               " (clip at 50 never engaged)"),
                         bool(sd_clip < sd_sq) if decidable else None, SOURCE,
                         id=claim_id(NAME, "relu2-clip50", "varies-less"),
                         value=sd_clip, comparison="<", threshold=sd_sq))
    return out
