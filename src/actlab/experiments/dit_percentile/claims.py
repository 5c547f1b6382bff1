"""The claims of ``dit-percentile`` ("Bug or Feature²" §7, App. B.2, B.4, C.1).

Every condition of a seed shares initial weights, batches, diffusion steps and noise, so each
quality number is a paired difference per seed and the runner judges it on the per-seed
differences (paired, the default). "No worse than" is a one-sided claim against a margin of
ours (:data:`QUALITY_MARGIN`); "at every K" an all-of over the Top-K levels. The speed claims
judge each seed's own ratio of its two timed runs against a constant bar (the clock's noise
within a run is shown, the seeds' spread decides).
"""

from __future__ import annotations

from actlab.runner.claims import ClaimSpec, all_of, claim_id, ge, judge_all, le, lt
from actlab.runner.experiment import Claim

NAME = "dit-percentile"
PAPER = "bug-or-feature"
# §7 / App. C.1 (6): DiT-S/2 with GELU, FID and IS of Percentile LN (q = 0.5) and LayerNorm.
PUBLISHED_QUALITY = {"fid_pln": 48.21, "is_pln": 31.41, "fid_ln": 49.40, "is_ln": 29.85}
# §7: up to ~28% slower while computing percentiles; DiT-S/2 at 1.00-1.03x once frozen.
PUBLISHED_SPEED = {"slowdown": 0.28, "speed_low": 1.00, "dit_high": 1.03}
# "No worse than" LayerNorm, ours: Percentile LN's final FID (IS) at most 10 % worse than
# LayerNorm's, relative to LayerNorm's, as a one-sided (non-inferiority) claim. The value is
# the experiment's freeze_tolerance, fixed before any run for the frozen-quality claim.
QUALITY_MARGIN = 0.10
QUALITY_POST_HOC = (
    "the 10 % non-inferiority margin was given to the FID and IS claims when they were "
    "restated as one-sided claims, after the default-scale reference's values were seen "
    "(it is the freeze_tolerance fixed before any run for the frozen-quality claim)"
)


def _topk_level(condition: str) -> float:
    """``gelu-topk-0.05`` -> 0.05: the parts of the all-of in the same order in every seed."""
    try:
        return float(condition.rsplit("-", 1)[1])
    except (IndexError, ValueError):
        return float("inf")


def claims(summary: dict) -> list[Claim]:
    """FID and IS no worse than LayerNorm; quality after freezing within the tolerance;
    slower during warm-up, at least LayerNorm's speed after freezing; Top-K sharper than ReLU."""
    empty = {"mean": None, "sd": None, "seeds": 0}
    fid = {**empty, **PUBLISHED_QUALITY, **summary.get("fid_vs_layernorm", {}),
           "margin": QUALITY_MARGIN}
    score = {**empty, **PUBLISHED_QUALITY, **summary.get("is_vs_layernorm", {}),
             "margin": QUALITY_MARGIN}
    frozen = {**empty, **summary.get("frozen_fid_vs_layernorm", {}),
              "tol": summary.get("freeze_tolerance")}
    speed = summary.get("speed", {})
    empty_speed = {"ratio": None, "noise": None}
    warm = {**empty_speed, **PUBLISHED_SPEED, **speed.get("warmup", {})}
    after = {**empty_speed, **PUBLISHED_SPEED, **speed.get("after", {})}
    specs = [
        ClaimSpec(
            id=claim_id(NAME, "percentile", "fid-no-worse-than-layernorm"),
            text="Percentile LayerNorm (q = 0.5) gives an FID no worse than LayerNorm's "
            "(paper, DiT-S/2: {fid_pln:.2f} against {fid_ln:.2f}; no worse, ours: at most "
            "{margin:.0%} above LayerNorm's)",
            measured="final FID (percentile − layernorm) / layernorm {mean:+.3f} (seed sd "
            "{sd:.3f}, {seeds} seeds)",
            check=le(fid.get("mean"), QUALITY_MARGIN),
            source=PAPER,
            where="§7; App. C.1",
            numbers=fid,
            quoted=("fid_pln", "fid_ln"),
            post_hoc=QUALITY_POST_HOC,
        ),
        ClaimSpec(
            id=claim_id(NAME, "percentile", "is-no-worse-than-layernorm"),
            text="Percentile LayerNorm (q = 0.5) gives an IS no worse than LayerNorm's "
            "(paper, DiT-S/2: {is_pln:.2f} against {is_ln:.2f}; no worse, ours: at most "
            "{margin:.0%} below LayerNorm's)",
            measured="final IS (layernorm − percentile) / layernorm {mean:+.3f} (seed sd "
            "{sd:.3f}, {seeds} seeds)",
            check=le(score.get("mean"), QUALITY_MARGIN),
            source=PAPER,
            where="App. C.1; (6) DiT-S/2 improvements with Percentile LayerNorm",
            numbers=score,
            quoted=("is_pln", "is_ln"),
            post_hoc=QUALITY_POST_HOC,
        ),
        ClaimSpec(
            id=claim_id(NAME, "percentile-frozen", "quality-close-to-layernorm"),
            text="after Accumulation Stop, quality stays close to the baseline (ours: final "
            "FID at most {tol:.0%} above LayerNorm's)",
            measured="final FID (frozen − layernorm) / layernorm {mean:+.3f} (seed sd "
            "{sd:.3f}, {seeds} seeds)",
            check=le(frozen.get("mean"), frozen.get("tol")),
            source=PAPER,
            where="§7",
            numbers=frozen,
        ),
        ClaimSpec(
            id=claim_id(NAME, "percentile-frozen", "slower-during-warmup"),
            text="computing percentile statistics during warm-up costs throughput against "
            "LayerNorm (paper: up to ~{slowdown:.0%} slower)",
            measured="{ratio:.3f}x LayerNorm's steps/s during warm-up (clock noise ± "
            "{noise:.3f})",
            check=lt(warm.get("ratio"), 1.0),
            source=PAPER,
            where="§7",
            numbers=warm,
            quoted=("slowdown",),
        ),
        ClaimSpec(
            id=claim_id(NAME, "percentile-frozen", "layernorm-speed-after-freezing"),
            text="after Accumulation Stop, training runs at >= {speed_low:.2f}x LayerNorm's "
            "speed (paper, DiT-S/2: {speed_low:.2f}-{dit_high:.2f}x)",
            measured="{ratio:.3f}x (clock noise ± {noise:.3f})",
            check=ge(after.get("ratio"), PUBLISHED_SPEED["speed_low"]),
            source=PAPER,
            where="§7; App. B.4, Table 10",
            numbers=after,
            quoted=("speed_low", "dit_high"),
        ),
    ]
    if "detail_vs_relu" in summary:
        detail = {"relu": None, "topk": None, **summary["detail_vs_relu"]}
        per_k = sorted((detail.get("per_k") or {}).items(), key=lambda kv: _topk_level(kv[0]))
        finite = [(k, v) for k, v in per_k if v is not None]
        worst = max(finite, key=lambda kv: kv[1]) if finite else (None, None)
        detail.update(worst_k=worst[0], worst=worst[1], levels=len(per_k))
        specs.append(
            ClaimSpec(
                id=claim_id(NAME, "gelu-topk", "sharper-detail-than-relu"),
                text="GELU with Top-K keeps sharper detail than ReLU at every K (our proxy: the "
                "samples' Laplacian energy over the test images')",
                measured="detail ratio ReLU {relu:.3g} vs Top-K mean {topk:.3g}; ReLU − Top-K "
                "largest at {worst_k}: {worst:+.3g} ({levels} levels)",
                check=all_of(*(lt(v, 0.0) for _, v in per_k)) if per_k else lt(None, 0.0),
                source=PAPER,
                where="App. B.2, Fig. 17",
                numbers=detail,
            )
        )
    return judge_all(specs)
