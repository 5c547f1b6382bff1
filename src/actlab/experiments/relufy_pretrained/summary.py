"""The ``relufy-pretrained`` summary: per stage, sparsity, negative share and embedding cosine."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from actlab.experiments.relufy_pretrained import RelufyConfig

STAGES = ("original", "relu", "relu_finetuned")


def build_summary(config: RelufyConfig, table: Any) -> dict:
    """Per stage: mean sparsity, negative share, cosine to the original; per layer too."""
    summary: dict = {"objective": "embedding self-distillation, loss 1 - cos(e_relu, e_gelu)",
                     "fine_tune_steps": config.steps, "stages": {}}
    for stage in STAGES:
        rows = table[table.run == stage]
        if rows.empty:
            continue
        layer_rows = rows[rows.layer != ""]
        per_layer = layer_rows.groupby(["metric", "layer"]).value.mean()
        cos = rows[(rows.metric == "cosine_to_original") & (rows.layer == "")].value
        cos_min = rows[(rows.metric == "cosine_min") & (rows.layer == "")].value
        summary["stages"][stage] = {
            "sparsity": float(layer_rows[layer_rows.metric == "sparsity"].value.mean()),
            "preact_neg_frac": float(layer_rows[layer_rows.metric == "preact_neg_frac"].value.mean()),
            "cosine_to_original": float(cos.mean()),
            "cosine_min": float(cos_min.min()),
            "sparsity_per_layer": {k: float(v) for k, v in per_layer.get("sparsity", {}).items()},
            "preact_neg_frac_per_layer": {k: float(v) for k, v in
                                          per_layer.get("preact_neg_frac", {}).items()},
        }
    return summary
