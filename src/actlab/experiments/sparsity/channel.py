"""Structured (per-channel) Top-K on the ResNet: the ``topk-channel`` points of ``sparsity``
against per-activation Top-K at the same K ("Bug or Feature²" §4, App. B.2).

§4 distinguishes for ResNet-18 "per-activation sparsity, which zeros individual activation
values, and per-channel (structured) sparsity, which zeros entire feature map channels";
App. B.2: "structured (per-channel) sparsity incurs a heavier penalty, dropping to 74.7% at
95%". Method ``topk-channel`` runs GELU with ``topk=K:channel``
(:func:`actlab.activations.sparse.channel_topk`: the ceil(K·C) channels of largest spatial
mean kept whole per example; the score is ours) at ``channel_levels``. Per-activation Top-K
on (N, C, H, W) keeps ceil(K·C) channels at every position, so at one K both keep the same
number of entries per layer: the pairs compare where the zeros go, not how many there are.
Seeds pair (same initialisation and batches). The points stay out of the cliff fit, whose
points and verdicts are the two mechanisms' (``METHODS``).
"""

from __future__ import annotations

from typing import Any

METHOD = "topk-channel"
# Models whose activations are (N, C, H, W) maps: per-channel Top-K is defined on them only.
CHANNEL_MODELS = ("resnet",)


def channel_spec(level: float) -> str:
    """The activation spec of a ``topk-channel`` point at retention ``level``."""
    return f"gelu:topk={level:g}:channel"


def channel_summary(points: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Per model with ``topk-channel`` points: those points (by level) and, at every level
    the per-activation ``topk`` sweep shares, the pair (accuracies, sparsities, difference
    per-activation minus per-channel); ``None`` without such points."""
    out: dict[str, Any] = {}
    for model in sorted({p["model"] for p in points if p["method"] == METHOD}):
        chan = {p["level"]: p for p in points if p["model"] == model and p["method"] == METHOD}
        per_entry = {p["level"]: p for p in points
                     if p["model"] == model and p["method"] == "topk"}
        out[model] = {
            "points": [{k: chan[level][k] for k in ("level", "accuracy", "sparsity", "neg_frac")}
                       for level in sorted(chan, reverse=True)],
            "pairs": [{"level": level, "per_activation_accuracy": per_entry[level]["accuracy"],
                       "channel_accuracy": chan[level]["accuracy"],
                       "per_activation_sparsity": per_entry[level]["sparsity"],
                       "channel_sparsity": chan[level]["sparsity"],
                       "difference": per_entry[level]["accuracy"] - chan[level]["accuracy"]}
                      for level in sorted(set(chan) & set(per_entry), reverse=True)],
        }
    return out or None
