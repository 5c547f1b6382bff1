"""Floating-point policy on CUDA: full float32 unless a config asks for bf16.

Ampere and newer GPUs may run float32 matrix products and convolutions in TF32 (10-bit
mantissa). That is fine for throughput, but curvature (Lanczos on Hessian products),
theory-against-measurement comparisons and the CPU/CUDA equality tests need float32's
precision, so every unit runs with TF32 off. Reduced precision is opt-in and explicit:
``dtype="bfloat16"`` in a config runs forward passes under ``torch.autocast``.
:func:`precision_flags` is what ``env.json`` records, so a reader knows what was in force.
"""

from __future__ import annotations

from typing import Any

import torch


def use_strict_float32() -> None:
    """Turn TF32 off for matrix products and cuDNN convolutions (process-wide)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def precision_flags() -> dict[str, Any]:
    """The precision switches in force now (TF32 for matmul and cuDNN, matmul precision)."""
    return {
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cuda_matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
        "cuda_matmul_allow_bf16_reduced_precision_reduction": bool(
            torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction
        ),
    }
