"""The claims of the ``sparsity`` experiment, read from its summary."""

from __future__ import annotations

import numpy as np

from actlab.runner.claims import claim_id
from actlab.runner.experiment import Claim

METHODS = ("percentile", "topk")  # sparsity methods of the sweep


def claims(summary: dict) -> list[Claim]:
    """The cliff, the plateau, skip robustness, Percentile Centering sets the level."""
    result: list[Claim] = []
    points = summary.get("points", [])
    if summary.get("N") is not None:
        cliff = summary["cliff_sparsity"]
        result.append(Claim(
            "accuracy has a sparsity cliff: sharp fit (N > 3) dropping 10% only beyond "
            "s = 0.7 (published A=0.978 B=0.635 N=16.72 R²=0.565 on CIFAR/ImageNet/GPT)",
            f"A={summary['A']:.3f} B={summary['B']:.3f} N={summary['N']:.2f} "
            f"R²={summary['r2']:.2f}, cliff at s={'none' if cliff is None else f'{cliff:.2f}'}",
            bool(summary["N"] > 3 and cliff is not None and cliff > 0.7), "seed 003 §4.1",
            id=claim_id("sparsity", "all", "sparsity-cliff"), value=summary["N"],
            comparison="compound", threshold=3.0))
    low = [p["normalized_accuracy"] for p in points if p["sparsity"] <= 0.7 and "normalized_accuracy" in p]
    high = [p["normalized_accuracy"] for p in points if p["sparsity"] >= 0.9 and "normalized_accuracy" in p]
    if low and high:
        result.append(Claim("accuracy nearly flat up to 70% sparsity (mean normalised >= 0.95) "
                            "and lower beyond 90%",
                            f"mean {np.mean(low):.3f} (s<=0.7, {len(low)} pts) vs "
                            f"{np.mean(high):.3f} (s>=0.9, {len(high)} pts)",
                            bool(np.mean(low) >= 0.95 and np.mean(high) < np.mean(low)),
                            "seed 003 §4.1", id=claim_id("sparsity", "all", "flat-up-to-70"),
                            value=np.mean(low), comparison="compound", threshold=0.95))
    for method in METHODS:
        plain = {p["level"]: p for p in points if p["model"] == "mlp" and p["method"] == method}
        skip = {p["level"]: p for p in points if p["model"] == "mlp-skip" and p["method"] == method}
        common = sorted(set(plain) & set(skip))
        if common:
            hardest = common[-1] if method == "percentile" else common[0]
            a, b = plain[hardest]["accuracy"], skip[hardest]["accuracy"]
            result.append(Claim(f"skip connections make the MLP more robust at the highest "
                                f"{method} sparsity",
                                f"level {hardest:g}: MLP {a:.3f} vs MLP+skip {b:.3f}", b > a,
                                "seed 003 §4.1, App. A.3",
                                id=claim_id("sparsity", method, "skip-more-robust"), value=b,
                                comparison=">", threshold=a))
    pc = [p for p in points if p["method"] == "percentile" and p["model"] in ("mlp", "mlp-skip", "vit")]
    if pc:
        err = max(abs(p["sparsity"] - p["level"]) for p in pc)
        result.append(Claim("Percentile Centering sets the sparsity of the following ReLU to q "
                            "(LayerNorm flavour, |s - q| < 0.05)", f"max |s - q| = {err:.3f}",
                            err < 0.05, "seed 003 §4",
                            id=claim_id("sparsity", "percentile", "centering-sets-sparsity"),
                            value=err, comparison="<", threshold=0.05))
    return result
