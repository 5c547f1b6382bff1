"""The claims of the ``sparse-activations`` experiment, read from its summary."""

from __future__ import annotations

import numpy as np

from actlab.runner.claims import claim_id
from actlab.runner.experiment import Claim


def claims(summary: dict) -> list[Claim]:
    """Table 1's qualitative findings, as far as our setups cover them."""
    cells = summary.get("table", {})
    result: list[Claim] = []
    src = "seed 003 §5.1, Table 1"

    def get(setup: str, act: str, key: str) -> float | None:
        return cells.get(setup, {}).get(act, {}).get(key)

    relu2_none, relu_none = get("mlp:none", "relu2", "accuracy_mean"), get("mlp:none", "relu", "accuracy_mean")
    normed = [get(s, "relu2", "accuracy_mean") for s in ("mlp:layernorm", "mlp:rmsnorm")]
    normed = [v for v in normed if v is not None]
    if relu2_none is not None and relu_none is not None and normed:
        result.append(Claim("ReLU² degrades on the MLP without norm (>= 5 pp below ReLU) and "
                            "recovers with LayerNorm/RMSNorm",
                            f"no norm {relu2_none:.3f} (ReLU {relu_none:.3f}); with norm "
                            f"{max(normed):.3f}",
                            bool(relu2_none < relu_none - 0.05 and max(normed) > relu2_none + 0.05), src,
                            id=claim_id("sparse-activations", "relu2", "mlp", "degrades-without-norm"),
                            value=relu2_none, comparison="compound", threshold=relu_none - 0.05))
    r2_bn, r_bn = get("resnet:batchnorm", "relu2", "accuracy_mean"), get("resnet:batchnorm", "relu", "accuracy_mean")
    if r2_bn is not None and r_bn is not None:
        result.append(Claim("ReLU² collapses on the ResNet with BatchNorm (>= 10 pp below ReLU)",
                            f"ReLU² {r2_bn:.3f} vs ReLU {r_bn:.3f}", bool(r2_bn < r_bn - 0.1), src,
                            id=claim_id("sparse-activations", "relu2", "resnet", "collapses-with-batchnorm"),
                            value=r2_bn, comparison="<", threshold=r_bn - 0.1))
    diffs_s, diffs_a = [], []
    for setup in cells:
        s_n, s_r = get(setup, "noisy_relu", "sparsity_mean"), get(setup, "relu", "sparsity_mean")
        a_n, a_r = get(setup, "noisy_relu", "accuracy_mean"), get(setup, "relu", "accuracy_mean")
        if None not in (s_n, s_r, a_n, a_r):
            diffs_s.append(s_n - s_r)
            diffs_a.append(a_n - a_r)
    if diffs_s:
        result.append(Claim("NoisyReLU matches ReLU's sparsity (|mean diff| < 0.1) with comparable "
                            "accuracy (|mean diff| < 3 pp)",
                            f"sparsity diff {np.mean(diffs_s):+.3f}, accuracy diff {np.mean(diffs_a):+.3f}",
                            bool(abs(np.mean(diffs_s)) < 0.1 and abs(np.mean(diffs_a)) < 0.03), src,
                            id=claim_id("sparse-activations", "noisy-relu", "matches-relu"),
                            value=np.mean(diffs_s), comparison="compound", threshold=0.1))
    sugar = [(get(s, "sugar", "sparsity_mean"), get(s, "relu", "sparsity_mean")) for s in cells]
    sugar = [(a, b) for a, b in sugar if a is not None and b is not None]
    if sugar:
        mean_sugar, mean_relu = np.mean([a for a, _ in sugar]), np.mean([b for _, b in sugar])
        result.append(Claim("SUGAR gives the highest sparsity (at least ReLU's, on average)",
                            f"SUGAR {mean_sugar:.3f} vs ReLU {mean_relu:.3f}",
                            bool(mean_sugar >= mean_relu), src,
                            id=claim_id("sparse-activations", "sugar", "highest-sparsity"),
                            value=mean_sugar, comparison=">=", threshold=mean_relu))
    wins = total = 0
    for row in cells.values():
        accs = {a: c["accuracy_mean"] for a, c in row.items() if c["accuracy_mean"] is not None}
        if "gelu" in accs and len(accs) > 1:
            total += 1
            wins += accs["gelu"] >= max(accs.values()) - 0.005
    if total:
        result.append(Claim("GELU is the strongest general-purpose baseline (best, within 0.5 pp, "
                            "in most setups)", f"best in {wins} of {total} setups",
                            wins * 2 > total, src,
                            id=claim_id("sparse-activations", "gelu", "strongest-baseline"),
                            value=wins, comparison=">", threshold=total / 2))
    bn = get("resnet:batchnorm", "relu", "neg_frac_mean")
    others = [get(s, "relu", "neg_frac_mean") for s in cells if not s.startswith("resnet")]
    others = [v for v in others if v is not None]
    if bn is not None and others:
        result.append(Claim("negative pre-activations are substantial (>= 0.55) without "
                            "mean-centering; ResNet with BatchNorm is the exception (lower)",
                            f"ReLU neg share: others mean {np.mean(others):.3f}, ResNet+BN {bn:.3f}",
                            bool(np.mean(others) >= 0.55 and bn < np.mean(others)), src,
                            id=claim_id("sparse-activations", "relu", "negative-share-substantial"),
                            value=np.mean(others), comparison="compound", threshold=0.55))
    return result
