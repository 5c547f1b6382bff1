"""Model building blocks and small reference models, one readable file per model family
(``actlab.nn.gpt``, ``actlab.nn.vit`` ...), norms and the losses by name.

Names are imported on first use, so that ``import actlab.nn`` stays cheap.
"""

from __future__ import annotations

from actlab._lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "FFN": ".ffn",
    "GatedFFN": ".ffn",
    "gated_ffn": ".ffn",
    "matched_width": ".ffn",
    "ffn_param_count": ".ffn",
    "ffn_flops_per_token": ".ffn",
    "sparse_down": ".sparse_ffn",
    "sparse_inference": ".sparse_ffn",
    "sparse_linear": ".sparse_kernel",
    "calibrate_thresholds": ".sparse_calibration",
    "ResidualMLP": ".residual_mlp",
    "OneBlock": ".one_block",
    "MLP": ".mlp",
    "DeepMLP": ".deep_mlp",
    "ResNet": ".resnet",
    "ViT": ".vit",
    "MaxViT": ".maxvit",
    "MaxViTConfig": ".maxvit",
    "maxvit_config": ".maxvit",
    "ConvAutoencoder": ".autoencoder",
    "RMSNorm": ".norms",
    "PercentileLayerNorm": ".norms",
    "PercentileBatchNorm": ".norms",
    "make_norm": ".norms",
    "parse_norm": ".norm_spec",
    "GPT": ".gpt",
    "GPTConfig": ".gpt",
    "DiT": ".dit",
    "DiTConfig": ".dit",
    "dit_config": ".dit",
    "get_loss": ".losses",
})
