"""The claims of the ``spikes`` experiment, read from its summary: the statements of "Bug or
Feature²" (long version) §6 on ReLU² spikes and clipping, with its App. B.3.1 / Table 6 on
the seeds, and Fig. 16 on squared vs plain activations.

A clip that never engages (ReLU² never exceeded the clip) leaves training unchanged, so the
claims comparing it are left undecided then. A claim is made only when the activations it
compares were run and measured.
"""

from __future__ import annotations

import numpy as np

from actlab.runner.claims import ClaimSpec, claim_id, ge, gt, judge_all, le, lt
from actlab.runner.experiment import Claim

NAME = "spikes"


def claims(summary: dict) -> list[Claim]:
    """§6 / Table 6 and Fig. 16, each decided by the paper's factor and clips (and a
    loss tolerance of ours)."""
    acts = summary["activations"]

    def largest(spec: str) -> float:
        return acts[spec]["largest_range"] if spec in acts else float("nan")

    def loss(spec: str) -> float:
        return acts[spec]["val_loss"]["mean"] if spec in acts else float("nan")

    def sd(spec: str) -> float:
        return acts[spec]["val_loss"]["sd"] if spec in acts else float("nan")

    n = {"factor_low": 4.0, "factor_high": 25.0,  # §6: ReLU² amplifies the spike 4 to 25x
         "clip15": 15.0, "clip50": 50.0,  # §6: the two clipping thresholds
         "loss_tol": 0.01,  # ours: "without degrading performance" read as within 0.01 nats
         "relu2": largest("relu2"), "base": max(largest("relu"), largest("gelu")),
         "range_clip50": largest("relu2:clip=50"),
         "loss_relu2": loss("relu2"), "loss_clip15": loss("relu2:clip=15"),
         "loss_clip50": loss("relu2:clip=50"),
         "squared": min(loss("relu2"), loss("gelu2")), "plain": min(loss("relu"), loss("gelu")),
         "sd_relu2": sd("relu2"), "sd_clip50": sd("relu2:clip=50")}
    n["factor"] = n["relu2"] / n["base"] if n["base"] else float("nan")
    n["gap"] = n["loss_clip50"] - n["loss_relu2"]
    engaged = {c: n["relu2"] > n[f"clip{c}"] for c in (15, 50)}
    never = {c: "" if engaged[c] else f"ReLU² never exceeded {c}: the clip never engaged"
             for c in (15, 50)}

    def note(clip: int) -> str:
        return "" if engaged[clip] else f" (clip at {clip} never engaged)"

    def finite(*names: str) -> bool:
        return all(np.isfinite(n[name]) for name in names)

    specs = []
    if finite("base", "relu2"):
        specs.append(ClaimSpec(
            id=claim_id(NAME, "relu2", "amplifies-spikes"),
            text="relu2 amplifies spikes >= {factor_low:g}x over relu and gelu (largest "
                 "down-projection input range; the paper: {factor_low:g} to {factor_high:g}x "
                 "across three seeds at layer 2)",
            measured="relu2 {relu2:.1f} vs max(relu, gelu) {base:.1f} ({factor:.2f}x)",
            check=ge(n["factor"], n["factor_low"]), source="bug-or-feature",
            where="§6, Table 2", numbers=n, quoted=("factor_low", "factor_high")))
    if finite("range_clip50", "relu2"):
        specs.append(ClaimSpec(
            id=claim_id(NAME, "relu2-clip50", "removes-spikes"),
            text="clipping relu2 at {clip50:g} removes the spikes",
            measured="clip50 {range_clip50:.1f} vs relu2 {relu2:.1f}"
                     + ("" if engaged[50] else " (relu2 never exceeded 50: nothing to remove)"),
            check=lt(n["range_clip50"], n["relu2"]), source="bug-or-feature", where="§6",
            numbers=n, quoted=("clip50",), undecided_because=never[50]))
    if finite("loss_clip50", "loss_relu2"):
        specs.append(ClaimSpec(
            id=claim_id(NAME, "relu2-clip50", "loss-not-degraded"),
            text="relu2:clip={clip50:g} does not degrade the loss (within {loss_tol:g} nats)",
            measured="clip50 - relu2 = {gap:+.4f}" + note(50),
            check=le(n["gap"], n["loss_tol"]), source="bug-or-feature", where="§6",
            numbers=n, quoted=("clip50",), undecided_because=never[50]))
    if finite("loss_clip15", "loss_clip50"):
        specs.append(ClaimSpec(
            id=claim_id(NAME, "relu2-clip15", "loss-degraded"),
            text="clipping at {clip15:g} degrades the loss relative to clipping at {clip50:g}",
            measured="clip15 {loss_clip15:.4f} vs clip50 {loss_clip50:.4f}" + note(15),
            check=gt(n["loss_clip15"], n["loss_clip50"]), source="bug-or-feature", where="§6",
            numbers=n, quoted=("clip15", "clip50"), undecided_because=never[15]))
    if finite("squared", "plain"):
        specs.append(ClaimSpec(
            id=claim_id(NAME, "squared", "lower-loss"),
            text="squared activations reach a lower loss than relu and gelu",
            measured="best squared {squared:.4f} vs best plain {plain:.4f}",
            check=lt(n["squared"], n["plain"]), source="bug-or-feature",
            where="App. B.3.1, Fig. 16", numbers=n))
    if "relu2" in acts and "relu2:clip=50" in acts:
        specs.append(ClaimSpec(
            id=claim_id(NAME, "relu2-clip50", "varies-less"),
            text="relu2:clip={clip50:g} varies less across seeds than relu2",
            measured="sd {sd_clip50:.4f} vs {sd_relu2:.4f}" + note(50),
            check=lt(n["sd_clip50"], n["sd_relu2"]), source="bug-or-feature",
            where="§6; App. B.3.1, Table 6", numbers=n, quoted=("clip50",),
            undecided_because=never[50]))
    return judge_all(specs)
