"""The DiT pair at the papers' settings (``--paper``) and what a condition costs (``actlab plan``).

Both papers train the reference DiT: "Rethinking Activation Functions" §4.2 "Following the
official facebookresearch/DiT implementation", "Bug or Feature²" App. D.4 DiT-S/2 with the
Stable Diffusion VAE's latents. :data:`DIT_REFERENCE` is that implementation's training
(``train.py``: AdamW at 1e-4 without weight decay, global batch 256; the EMA decay 0.9999 is
the protocol's at the paper's length, :func:`~actlab.recipes.dit_setup.scaled_decay`) and
evaluation (``sample_ddp.py``: 50,000 samples drawn 32 at a time by ancestral sampling over
250 steps, guidance 1.5), whose counts "Bug or Feature²" §7 states for its FID as well. The
FID itself needs the user's VAE, Inception weights and reference set (``vae``,
``inception``, ``fid_reference``; :mod:`actlab.recipes.dit_quality`). The data are ImageNet at 256 x 256 as the
VAE's 4 x 32 x 32 latents (App. D.4; the 0.18215 scale is applied when the shards are read),
one folder of shards (:mod:`actlab.data.latents`). :func:`dit_workloads` prices one
condition of either experiment.
"""

from __future__ import annotations

from typing import Any

from actlab.runner.cost import Workload
from actlab.runner.paper import DataNeed, PaperPreset, code, doc, ours

RETHINKING = "Rethinking Activation Functions"
BUG_OR_FEATURE = "Bug or Feature²"
DIT_TRAIN = "facebookresearch/DiT train.py"
DIT_SAMPLE = "facebookresearch/DiT sample_ddp.py"

IMAGENET_LATENTS = DataNeed(
    what="ImageNet-1K at 256 x 256 as Stable Diffusion VAE latents",
    source=f"{RETHINKING} §4.2 'ImageNet-256'; {BUG_OR_FEATURE} App. D.4 (SD v1.5 VAE, "
           f"32 x 32 x 4 latents, scale 0.18215)",
    format="a folder of latent shards (actlab.data.latents): NAME.safetensors holding "
           "'latents' (N, 4, 32, 32) unscaled and 'labels' (N,), or NAME.npy with "
           "NAME.labels.npy",
    prefix="latents:")

DIT_REFERENCE = PaperPreset({
    "batch_size": code(DIT_TRAIN, 256, "--global-batch-size"),
    "lr": code(DIT_TRAIN, 1e-4, "AdamW"),
    "weight_decay": code(DIT_TRAIN, 0.0, "AdamW"),
    "fid_samples": code(DIT_SAMPLE, 50_000, "--num-fid-samples"),
    "sample_steps": code(DIT_SAMPLE, 250, "--num-sampling-steps"),
    "cfg_scale": code(DIT_SAMPLE, 1.5, "--cfg-scale"),
    "sampler": code(DIT_SAMPLE, "ddpm", "ancestral sampling over the respaced steps"),
    "sample_batch": code(DIT_SAMPLE, 32, "--per-proc-batch-size: samples drawn together"),
    "eval_points": ours(8, "FID every 50,000 steps of 400,000, DiT train.py's --ckpt-every"),
}, data=IMAGENET_LATENTS, notes=(
    "The EMA decay is 0.9999 at the paper's length (the protocol scales it with steps).",
    "No bfloat16 here: the DiT protocol trains in float32, as DiT's train.py does.",
    "FID needs --set vae=DIR inception=FILE fid_reference=PATH (the Stable Diffusion VAE, "
    "the FID Inception-v3 weights, reference images or guided-diffusion's .npz; "
    "docs/diffusion.md); without them the run records losses and hidden states only.",
))

DIT_SHIFT = DIT_REFERENCE.extend({
    "model": doc(RETHINKING, "§4.2", "DiT-B/2"),
    "steps": doc(RETHINKING, "§4.2", 400_000, "'400,000 optimization steps'"),
    "fid_samples": ours(50_000, "'Rethinking' states no FID sample count (App. E.1); "
                                "DiT's FID-50K"),
})

DIT_PERCENTILE = DIT_REFERENCE.extend({
    "model": doc(BUG_OR_FEATURE, "App. D.4", "DiT-S/2", "12 blocks, D = 384, 6 heads"),
    "bias": doc(BUG_OR_FEATURE, "App. D.4", False, "'All linear layers omit bias terms'"),
    "steps": doc(BUG_OR_FEATURE, "App. B.2", 300_000, "samples 'improve progressively to "
                                                      "300K steps', read as the length"),
    "fid_samples": doc(BUG_OR_FEATURE, "§7", 50_000, "'computed on 50,000 generated samples'"),
    "sample_steps": doc(BUG_OR_FEATURE, "§7", 250, "'250 sampling steps'"),
    "cfg_scale": doc(BUG_OR_FEATURE, "§7", 1.5, "'Classifier-Free Guidance (s=1.5)'"),
    "eval_points": ours(6, "FID every 50,000 steps of 300,000 (DiT's --ckpt-every); §7 "
                           "reports the end"),
})


def data_shape(config: Any) -> tuple[tuple[int, int, int], int]:
    """``((C, H, W), classes)`` of the config's data: the digits, or the latent shards'
    (their labels are read; no latent is)."""
    if config.data == "digits":
        return (1, 8, 8), 10
    from actlab.data.latents import LatentShards

    shards = LatentShards(config.data[len("latents:"):])
    return tuple(shards.latent_shape), max(shards.num_classes, 1)


def dit_workloads(config: Any, *, activation: str, norm: str = "layernorm",
                  bias: bool = True) -> list[Workload]:
    """The DiT one seed of a condition trains (with its EMA), priced with the protocol's
    evaluations: the loss probe and hidden-state probe at every log point, and the guided
    samples at every FID checkpoint where the run scores them (the digits, or latents with
    the FID sources given); the VAE decoder and the FID feature network are not priced."""
    from torch import empty, zeros

    from actlab.device import on_device
    from actlab.recipes.dit_protocol import PROBE_IMAGES
    from actlab.recipes.dit_setup import DiTData, build_model

    shape, classes = data_shape(config)
    data = DiTData("plan", shape, classes, lambda *_: None, empty(0), empty(0), None)

    def build() -> Any:
        with on_device("meta"):
            return build_model(config, data, activation=activation, norm=norm, seed=0,
                               bias=bias)

    def example(n: int) -> tuple:
        return empty(n, *shape), zeros(n, dtype=int), zeros(n, dtype=int)

    guided = 2 if config.cfg_scale != 1.0 else 1  # the null-class pass of guidance
    # samples are drawn where they are scored: the digits, or latents with the FID sources
    samples = config.data == "digits" or getattr(config, "scores_latents", False)
    evaluation = (len(config.log_steps()) * (config.loss_samples + PROBE_IMAGES)
                  + samples * len(config.eval_steps()) * config.fid_samples
                  * config.sample_steps * guided)
    return [Workload(config.model, build, example, config.steps, config.batch_size, "adamw",
                     ema=True, eval_samples=evaluation,
                     sample=f"latent {'x'.join(map(str, shape))}")]
