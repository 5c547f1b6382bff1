"""The claims of the ``spikes`` experiment, read from its summary: the statements of "Bug or
Feature²" (long version) §6 on ReLU² spikes and clipping, with its App. B.3.1 / Table 6 on
the seeds, and Fig. 16 on squared vs plain activations.

A clip that never engages (ReLU² never exceeded the clip) leaves training unchanged, so the
claims comparing it are left undecided then. A claim is made only when the activations it
compares were run and measured.

How the runner judges them over seeds: every activation of a seed starts from the same
initial weights (no activation has parameters) and sees the same batches, so a comparison of
two activations is paired: its sample is the per-seed difference (the default). That the clip
at 50 bounds the down-projection input range at 50 is true by construction, so it is a test of
actlab (tests/test_spikes_measures.py), not a claim. Two statements are about the seeds as a
whole: "varies less across seeds" compares spreads, which no single seed has, so it is made
only on a summary of several seeds and stays undecided over seeds; "even the smallest seed
amplifies" is the label "amplifies" in every seed.

The arms (:mod:`actlab.experiments.spikes.arms`) add, when they ran: Fig. 6's spike range (and
up-projection input range) under each centring or quantile norm against RMSNorm, paired per
seed; the spike's block against the first third of the blocks (ours: what "early layers"
means), at the depth arm's shape and the base's; GELU² against ReLU² (the short version's
Table 7 paragraph) in each arm; and Tables 7-8 at the depth arm's shape. Every bar was fixed
before these arms were first run; the paper gives no number for any of them but the losses.
"""

from __future__ import annotations

import numpy as np

from actlab.experiments.spikes.measures import WEIGHT_KINDS
from actlab.nn.norm_spec import parse_norm
from actlab.runner.claims import (
    ClaimSpec,
    all_of,
    among,
    claim_id,
    ge,
    gt,
    judge_all,
    le,
    lt,
    within_factor,
)
from actlab.runner.experiment import Claim

NAME = "spikes"
# the short version has no numbered sections: its paragraph on clipping and GELU², by title
SHORT_TABLE7 = "Table 7; Clipped ReLU² and GELU² improve performance"


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
    if finite("loss_clip50", "loss_relu2"):
        specs.append(ClaimSpec(
            id=claim_id(NAME, "relu2-clip50", "loss-not-degraded"),
            text="relu2:clip={clip50:g} does not degrade the loss (one-sided, ours: at most "
                 "{loss_tol:g} nats above relu2's)",
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
    if finite("sd_clip50", "sd_relu2"):  # a spread over seeds: several seeds' summary only
        specs.append(ClaimSpec(
            id=claim_id(NAME, "relu2-clip50", "varies-less"),
            text="relu2:clip={clip50:g} varies less across seeds than relu2",
            measured="sd {sd_clip50:.4f} vs {sd_relu2:.4f}" + note(50),
            check=lt(n["sd_clip50"], n["sd_relu2"]), source="bug-or-feature",
            where="§6; App. B.3.1, Table 6", numbers=n, quoted=("clip50",),
            undecided_because=never[50]))
    specs += _seed_and_short_version_claims(acts, n, largest, loss)
    specs += _spike_layer_claims(summary.get("spike_layers", {}))
    specs += _norm_claims(summary.get("norms"))
    specs += _depth_claims(summary)
    return judge_all(specs)


def _seed_and_short_version_claims(acts: dict, n: dict, largest, loss) -> list[ClaimSpec]:
    """App. B.3.1 on the smallest ReLU² seed, and the short version's Table 7 statements."""
    specs = []
    per_seed = list(acts.get("relu2", {}).get("largest_range_per_seed", {}).values())
    m = {**n, "seed_factor_low": 4.0, "seed_factor_high": 6.0,  # App. B.3.1: "4–6×"
         "smallest_relu2": min(per_seed) if per_seed else float("nan"),
         "gelu2_paper": 3.233, "clip50_paper": 3.236, "relu2_paper": 3.251,  # short, Table 7
         "loss_gelu2": loss("gelu2"), "range_gelu2": largest("gelu2"),
         "best_other": min((loss(a) for a in acts if a != "gelu2"), default=float("nan"))}
    m["seed_factor"] = m["smallest_relu2"] / n["base"] if n["base"] else float("nan")
    if per_seed and np.isfinite(n["base"]):
        # every seed's own label (a seed's summary holds that seed alone): held over seeds
        # when "amplifies" in every seed
        m["label"] = ("amplifies" if np.isfinite(m["seed_factor"])
                      and m["seed_factor"] >= m["seed_factor_low"] else "below")
        specs.append(ClaimSpec(
            id=claim_id(NAME, "relu2", "smallest-seed-still-amplifies"),
            text="even relu2's seed with the smallest spike stays >= {seed_factor_low:g}x above "
                 "relu and gelu (the paper: {seed_factor_low:g}-{seed_factor_high:g}x at layer 2)",
            measured="smallest relu2 seed {smallest_relu2:.1f} vs {base:.1f} ({seed_factor:.2f}x)",
            check=among(m["label"], ["amplifies"]), source="bug-or-feature",
            where="App. B.3.1, Table 6", numbers=m,
            quoted=("seed_factor_low", "seed_factor_high")))
    if "gelu2" in acts and len(acts) > 1 and np.isfinite(m["loss_gelu2"]):
        specs.append(ClaimSpec(
            id=claim_id(NAME, "gelu2", "best-loss"),
            text="gelu2 reaches the lowest loss of all activations (the paper: {gelu2_paper:g})",
            measured="gelu2 {loss_gelu2:.4f} vs best other {best_other:.4f}",
            check=le(m["loss_gelu2"], m["best_other"]), source="bug-or-feature-short",
            where=SHORT_TABLE7, numbers=m, quoted=("gelu2_paper",)))
    if np.isfinite(m["range_gelu2"]) and np.isfinite(n["relu2"]):
        specs.append(ClaimSpec(
            id=claim_id(NAME, "gelu2", "lower-spikes-than-relu2"),
            text="gelu2 produces lower spikes than relu2",
            measured="gelu2 {range_gelu2:.1f} vs relu2 {relu2:.1f}",
            check=lt(m["range_gelu2"], n["relu2"]), source="bug-or-feature-short",
            where=SHORT_TABLE7, numbers=m))
    if np.isfinite(n["loss_clip50"]) and np.isfinite(n["loss_relu2"]):
        engaged = n["relu2"] > n["clip50"]
        specs.append(ClaimSpec(
            id=claim_id(NAME, "relu2-clip50", "improves-over-relu2"),
            text="relu2:clip={clip50:g} improves over unclipped relu2 (the paper: "
                 "{clip50_paper:g} vs {relu2_paper:g})",
            measured="clip50 {loss_clip50:.4f} vs relu2 {loss_relu2:.4f}",
            check=lt(n["loss_clip50"], n["loss_relu2"]), source="bug-or-feature-short",
            where=SHORT_TABLE7, numbers=m, quoted=("clip50", "clip50_paper", "relu2_paper"),
            undecided_because="" if engaged else "ReLU² never exceeded 50: the clip never engaged"))
    return specs


def _spike_layer_claims(spike: dict, condition: str = "spike-layers") -> list[ClaimSpec]:
    """App. B.3.1, Tables 7 and 8: spike layers against the rest, averaged over the runs of
    one shape (ids ``spikes/<condition>/...``)."""
    if spike.get("runs", 0) < 1:
        return []
    n = {**spike, "down_low": 39.0, "down_high": 42.0, "up_paper": 7.0,  # Table 8 text
         "w_spike_paper": 2.299, "w_all_paper": 2.858,  # App. B.3.1, Table 8
         "symmetry_factor": 2.0}  # ours: "symmetric" read as |min| within 2x of max
    n["up_neg"] = -n["up_in_min"]
    stds_lower = [lt(n[f"w_std_{k}_spike"], n[f"w_std_{k}_others"]) for k in WEIGHT_KINDS]
    n["std_text"] = ", ".join(f"{k} {n[f'w_std_{k}_spike']:.4f} vs {n[f'w_std_{k}_others']:.4f}"
                              for k in WEIGHT_KINDS)
    where = "App. B.3.1, Table 8"
    return [
        ClaimSpec(
            id=claim_id(NAME, condition, "down-input-exceeds-up-input"),
            text="in spike layers the down-projection input reaches beyond the up-projection "
                 "input (the paper: max about {down_low:g}-{down_high:g} against about "
                 "+-{up_paper:g})",
            measured="down max {down_in_max:.2f} vs up max {up_in_max:.2f} (mean of {runs} runs)",
            check=gt(n["down_in_max"], n["up_in_max"]), source="bug-or-feature", where=where,
            numbers=n, quoted=("down_low", "down_high", "up_paper")),
        ClaimSpec(
            id=claim_id(NAME, condition, "up-input-symmetric"),
            text="up-projection inputs in spike layers are symmetric (|min| within "
                 "{symmetry_factor:g}x of max; the paper: about +-{up_paper:g})",
            measured="max {up_in_max:.2f}, min {up_in_min:.2f} (mean of {runs} runs)",
            check=within_factor(n["up_neg"], n["up_in_max"], n["symmetry_factor"]),
            source="bug-or-feature", where=where, numbers=n, quoted=("up_paper",)),
        ClaimSpec(
            id=claim_id(NAME, condition, "down-weights-not-larger"),
            text="down-projection weights in the spike layer are not larger than in the other "
                 "layers (the paper: max |W| {w_spike_paper:g} against {w_all_paper:g} overall)",
            measured="max |W_down| {w_absmax_down_spike:.3f} at the spike layer vs "
                     "{w_absmax_down_others:.3f} elsewhere (mean of {runs} runs)",
            check=le(n["w_absmax_down_spike"], n["w_absmax_down_others"]),
            source="bug-or-feature", where=where, numbers=n,
            quoted=("w_spike_paper", "w_all_paper")),
        ClaimSpec(
            id=claim_id(NAME, condition, "lower-weight-std"),
            text="every layer type has a lower weight standard deviation in the spike layer "
                 "than in the other layers",
            measured="spike vs others: {std_text} (mean of {runs} runs)",
            check=all_of(*stds_lower), source="bug-or-feature", where="App. B.3.1, Table 7",
            numbers=n),
    ]


# "Bug or Feature²" §6 (and the short version's paragraph on Fig. 7): Fig. 6 shows spike
# ranges shrinking under normalisation with centring or a quantile shift
FIG6 = "§6, Fig. 6 (the short version: Fig. 7)"
# the normalisations that centre (by the mean or by a quantile); RMSNorm and none do not
CENTRING = ("layernorm", "batchnorm", "percentile", "percentile-layernorm",
            "percentile-batchnorm")


def _norm_claims(norms: dict | None) -> list[ClaimSpec]:
    """Fig. 6: under every centring or quantile norm of the norm arm, each activation's spike
    range (and up-projection input range) is smaller than under RMSNorm, paired per seed (same
    initial weights and batches); and GELU² against ReLU² under each norm but the base's."""
    if not norms:
        return []
    arms = norms["arms"]
    rms = next((norm for norm in arms if parse_norm(norm)[0] == "rmsnorm"), None)
    specs: list[ClaimSpec] = []
    for norm, acts in arms.items():
        if norm != norms["base"]:
            specs += _gelu2_claims(norm, acts)
        if rms is None or parse_norm(norm)[0] not in CENTRING:
            continue
        for spec, arm in acts.items():
            other = arms[rms].get(spec, {})
            n = {"norm": norm, "rms": rms, "spec": spec,
                 "range": arm.get("largest_range_mean", float("nan")),
                 "range_rms": other.get("largest_range_mean", float("nan")),
                 "up": arm.get("up_in_range_mean", float("nan")),
                 "up_rms": other.get("up_in_range_mean", float("nan"))}
            for key, slug, what in (
                    ("range", "spike-range", "the spike range of {spec} is smaller than under "
                     "{rms} (largest down-projection input range over the layers; the paper: "
                     "spike ranges shrink with centring or quantile normalisation)"),
                    ("up", "up-input-range", "the up-projection input range of {spec} is "
                     "smaller than under {rms} (largest max - min over the layers; the paper: "
                     "the same pattern as the spikes)")):
                if np.isfinite(n[key]) and np.isfinite(n[f"{key}_rms"]):
                    specs.append(ClaimSpec(
                        id=claim_id(NAME, f"{norm}-{spec}", f"{slug}-below-rmsnorm"),
                        text="under {norm} " + what,
                        measured=f"{{{key}:.2f}} vs {{{key}_rms:.2f}} (mean over seeds)",
                        check=lt(n[key], n[f"{key}_rms"]), source="bug-or-feature", where=FIG6,
                        numbers=n))
    return specs


def _gelu2_claims(condition: str, acts: dict) -> list[ClaimSpec]:
    """The short version's Table 7 paragraph in one arm: GELU² spikes lower than ReLU²'s and
    reaches a lower loss (the paper: 3.233 against 3.251)."""
    if "gelu2" not in acts or "relu2" not in acts:
        return []
    g, r = acts["gelu2"], acts["relu2"]
    n = {"condition": condition,
         "range_gelu2": g.get("largest_range_mean", float("nan")),
         "range_relu2": r.get("largest_range_mean", float("nan")),
         "loss_gelu2": g["val_loss"]["mean"], "loss_relu2": r["val_loss"]["mean"],
         "gelu2_paper": 3.233, "relu2_paper": 3.251}  # the short version, Table 7 paragraph
    specs = []
    if np.isfinite(n["range_gelu2"]) and np.isfinite(n["range_relu2"]):
        specs.append(ClaimSpec(
            id=claim_id(NAME, f"{condition}-gelu2", "lower-spikes-than-relu2"),
            text="with {condition}, gelu2 produces lower spikes than relu2",
            measured="gelu2 {range_gelu2:.1f} vs relu2 {range_relu2:.1f} (mean over seeds)",
            check=lt(n["range_gelu2"], n["range_relu2"]), source="bug-or-feature-short",
            where=SHORT_TABLE7, numbers=n))
    if np.isfinite(n["loss_gelu2"]) and np.isfinite(n["loss_relu2"]):
        specs.append(ClaimSpec(
            id=claim_id(NAME, f"{condition}-gelu2", "loss-below-relu2"),
            text="with {condition}, gelu2 reaches a lower loss than relu2 (the paper: "
                 "{gelu2_paper:g} vs {relu2_paper:g})",
            measured="gelu2 {loss_gelu2:.4f} vs relu2 {loss_relu2:.4f}",
            check=lt(n["loss_gelu2"], n["loss_relu2"]), source="bug-or-feature-short",
            where=SHORT_TABLE7, numbers=n, quoted=("gelu2_paper", "relu2_paper")))
    return specs


def _depth_claims(summary: dict) -> list[ClaimSpec]:
    """Where in depth the spike sits (§6: "early layers"), at the depth arm's shape and, for
    the same activations, at the base's; GELU² against ReLU², and Tables 7-8, at that depth."""
    depth = summary.get("depth")
    if not depth:
        return []
    condition = f"{depth['n_layer']}-layers"
    specs = []
    for spec, arm in depth["activations"].items():
        specs += _location_claim(f"{condition}-{spec}", spec, arm, depth["n_layer"])
        base = summary["activations"].get(spec)
        if base and depth["base_n_layer"] != depth["n_layer"]:
            specs += _location_claim(f"{depth['base_n_layer']}-layers-{spec}", spec, base,
                                     depth["base_n_layer"])
    specs += _gelu2_claims(condition, depth["activations"])
    specs += _spike_layer_claims(depth["spike_layers"], f"{condition}-spike-layers")
    return specs


def _location_claim(condition: str, spec: str, arm: dict, n_layer: int) -> list[ClaimSpec]:
    """The spike's block (1-based, mean over seeds) in the first third of ``n_layer`` blocks."""
    block = arm.get("spike_block", float("nan"))
    if not np.isfinite(block):
        return []
    n = {"spec": spec, "block": block + 1.0, "n_layer": n_layer,
         "bar": n_layer / 3.0,  # ours: "early" read as the first third of the blocks
         "paper_last": 4.0, "paper_layers": 12.0}  # App. B.3.1: spike layers L1-L4 of 12
    return [ClaimSpec(
        id=claim_id(NAME, condition, "spike-in-first-third"),
        text="{spec}'s spike (largest down-projection input range) sits in an early block: "
             "block number <= {bar:.3g}, the first third of {n_layer} (ours; the paper: early "
             "layers, its spike layers L1-L{paper_last:g} of {paper_layers:g})",
        measured="block {block:.2f} of {n_layer} (1-based, mean over seeds)",
        check=le(n["block"], n["bar"]), source="bug-or-feature",
        where="§6; App. B.3.1, Table 7", numbers=n, quoted=("paper_last", "paper_layers"))]
