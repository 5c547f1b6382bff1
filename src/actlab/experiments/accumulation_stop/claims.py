"""The claims of the ``accumulation-stop`` experiment, read from its summary."""

from __future__ import annotations

import math

from actlab.runner.claims import claim_id
from actlab.runner.experiment import Claim


def claims(summary: dict) -> list[Claim]:
    """Frozen at least as fast as LayerNorm; dynamic slower; accuracy preserved."""
    out = []
    for model, entry in summary.get("models", {}).items():
        frozen, dynamic, ln = entry.get("percentile-frozen"), entry.get("percentile"), entry.get("layernorm")
        if frozen and ln and "ratio_to_layernorm" in frozen:
            ratio, noise = frozen["ratio_to_layernorm"], frozen.get("ratio_noise", math.nan)
            # within the measured noise of 1.0 the clock cannot tell: undecided
            held = None if not abs(ratio - 1.0) > noise else ratio >= 1.0
            out.append(Claim(f"{model}: after Accumulation Stop, training runs at >= 1.0x "
                             "LayerNorm's speed (seed: 1.00-1.34x)",
                             f"{ratio:.2f}x ± {noise:.2f}", held, "seed 003 §7, Table 10",
                             id=claim_id("accumulation-stop", model, "frozen-at-least-layernorm-speed"),
                             value=ratio, comparison=">=", threshold=1.0))
        if dynamic and frozen:
            out.append(Claim(f"{model}: dynamic percentiles cost speed that freezing recovers",
                             f"dynamic {dynamic.get('ratio_to_layernorm', math.nan):.2f}x, "
                             f"frozen {frozen.get('ratio_to_layernorm', math.nan):.2f}x",
                             frozen["steps_per_s"] > dynamic["steps_per_s"], "seed 003 §7",
                             id=claim_id("accumulation-stop", model, "freezing-recovers-speed"),
                             value=frozen["steps_per_s"], comparison=">",
                             threshold=dynamic["steps_per_s"]))
            rel = (frozen["accuracy"] - dynamic["accuracy"]) / max(dynamic["accuracy"], 1e-12)
            out.append(Claim(f"{model}: freezing keeps accuracy within 2% (relative) of dynamic "
                             "percentiles", f"{dynamic['accuracy']:.3f} -> {frozen['accuracy']:.3f} "
                             f"({100 * rel:+.1f}%)", rel > -0.02, "seed 003 §7, App. B.4",
                             id=claim_id("accumulation-stop", model, "freezing-keeps-accuracy"),
                             value=rel, comparison=">", threshold=-0.02))
    return out
