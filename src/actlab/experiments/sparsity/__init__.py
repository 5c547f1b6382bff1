"""``sparsity``: accuracy against controlled activation sparsity, and the sparsity cliff.

"Bug or Feature²" §4, App. B.2. Two mechanisms set the share of zero activations:

* Percentile Centering (``percentile``): ReLU after a norm that shifts each feature by its
  ``q``-th percentile (no learned shift, so the level holds), levels ``q``;
* Top-K (``topk``): GELU keeping the ``K`` largest activations, levels ``K``;
* structured Top-K (``topk-channel``, ResNet only: ``channel_levels`` of whole channels kept
  per example, :mod:`actlab.experiments.sparsity.channel`), against per-activation Top-K at
  the same K;
* Top-K with a frozen threshold (``topk-frozen``, §1 "An efficiency bonus"): the same levels
  as ``gelu:topk=K:freeze_after=topk_freeze_after``, exact Top-K during the warm-up while
  the threshold is tracked, then masking by comparison only; run on ``frozen_models``, its
  kept fraction recorded at every training step (``kept_fraction``, mean over sites);

on four CPU-scale models trained on scikit-learn's digits: the paper's MLP, the MLP with
skips, a small ResNet (BatchNorm flavour of the percentile norm) and a small ViT (the
percentile norm inside its MLPs); and, as the GPT rows of Tables 4/5 (App. B.2), a byte-level
GPT (model ``gpt``, the ``gpt_*`` fields and levels) trained with the language-model recipe,
Percentile Centering per token between its FFN's up-projection and a ReLU (``mlp_norm``, no
learned shift), Top-K on its GELU. As App. B.1.1's Fig. 8, model ``random-mlp`` trains
GELU with Top-K at ``topk_drift_levels`` beside plain GELU in a 3-block MLP on random data and
records its pre-activation gradient and weight drift
(:mod:`actlab.experiments.sparsity.topk_drift`). Each point records test accuracy (the GPT: validation
loss), the share of negative activation inputs and the measured sparsity (``|a| < 1e-7``). Accuracies are normalised by
the best of their (model, method) group and ``a(s) = A - B s^N`` is fitted to all points
(:func:`actlab.theory.fit.fit_cliff`); ``cliff_sparsity`` is where the fit is 10% below A.
Beside it, ``mechanism_fit`` adds §4.1's mechanism indicator (``A + C m - B s^N``, ``m = 1``
for Top-K; the additive form is ours, :func:`actlab.theory.fit.fit_cliff_indicator`) and
reports both R² and that of the indicator alone.
The frozen-threshold points stay out of the fit; they are compared with exact Top-K at the
same (model, level): accuracy difference within ``frozen_tolerance``, a tolerance fixed in
the config before any run (ours: about two binomial standard errors of a difference of two
accuracies near 90% on the 359 digits test images, 2 * sqrt(2 * 0.9 * 0.1 / 359) = 0.045,
rounded up to 0.05), and the kept fraction over training against K.

The GPT points have a loss, not an accuracy, so they stay out of the fit too; their summary
(``gpt``) gives the loss against sparsity per method, the rise of the loss between 11 % and
77 % sparsity (the paper's flat range), the width of the flat region (how far above the least
sparse point the loss stays within ``gpt_loss_tolerance`` of its minimum) and, for the
frozen-threshold Top-K, the loss difference to exact Top-K. ``gpt_loss_tolerance`` is ours,
fixed before any run: 0.02 nats, about twice the seed-to-seed sd of the validation loss of
our GPTs at these sizes (0.005-0.014 nats in ``gated-ffn`` and ``lm-shift``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from actlab.errors import ConfigError
from actlab.experiments.classifier_paper import (
    SPARSITY,
    ClassifierScale,
    classifier_settings,
    classifier_workloads,
)
from actlab.experiments.sparsity.channel import CHANNEL_MODELS, channel_spec
from actlab.experiments.sparsity.channel import METHOD as CHANNEL_METHOD
from actlab.experiments.sparsity.claims import GPT
from actlab.experiments.sparsity.claims import claims as summary_claims
from actlab.experiments.sparsity.figures import draw_figures
from actlab.experiments.sparsity.summary import build_summary
from actlab.experiments.sparsity.topk_drift import MODEL as TOPK_DRIFT_MODEL
from actlab.experiments.sparsity.topk_drift import drift_units, drift_workloads, run_drift_unit
from actlab.nn.classifiers import MODEL_KINDS
from actlab.recipes.gpt_cell import GPTCellFields, run_gpt_cell
from actlab.recipes.image_classifier import (
    check_cifar_dir,
    fit_and_measure,
    load_config_data,
    record_diverged,
)
from actlab.runner.experiment import (
    STATUS_OK,
    Claim,
    Experiment,
    RunContext,
    UnitContext,
    UnitResult,
    register,
)
from actlab.runner.fields import checked
from actlab.train.supervised import torch_threads

MODELS = (*MODEL_KINDS, GPT, TOPK_DRIFT_MODEL)


@dataclass
class SparsityConfig(GPTCellFields, ClassifierScale):
    """Models, levels and training of the sparsity sweep (``size``, ``training`` and
    ``max_steps``: :class:`~actlab.experiments.classifier_paper.ClassifierScale`)."""

    models: list[str] = checked(default_factory=lambda: list(MODELS), choices=MODELS,
                                nonempty=True)
    percentile_levels: list[float] = checked(
        default_factory=lambda: [0.1, 0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 0.98], gt=0, lt=1)
    topk_levels: list[float] = checked(
        default_factory=lambda: [0.9, 0.5, 0.3, 0.2, 0.1, 0.05, 0.02], gt=0, lt=1)
    # structured Top-K on the models of CHANNEL_MODELS (ours: topk_levels' 0.5 to 0.05, the
    # last App. B.2's "95%" channel sparsity)
    channel_levels: list[float] = checked(default_factory=lambda: [0.5, 0.2, 0.1, 0.05], gt=0,
                                          lt=1)
    steps: int = checked(500, ge=1)
    batch_size: int = checked(128, ge=1)
    lr: float = checked(1e-3, gt=0)
    cifar_dir: str = ""  # CIFAR-10 python files to use instead of digits
    cifar_limit: int = checked(0, ge=0)  # first N CIFAR training images (0: all)
    vit_lr: float = checked(3e-3, gt=0)
    threads: int = checked(1, ge=1)
    # the frozen-threshold Top-K variant (see the module docstring)
    frozen_models: list[str] = checked(default_factory=lambda: list(MODELS), choices=MODELS)
    topk_freeze_after: int = checked(100, ge=1)
    frozen_tolerance: float = checked(0.05, gt=0)  # fixed before any run
    # the GPT rows (model "gpt"): levels around the paper's 11 % to 77 % flat range and 90 %
    gpt_percentile_levels: list[float] = checked(
        default_factory=lambda: [0.11, 0.3, 0.5, 0.77, 0.9], gt=0, lt=1)
    gpt_topk_levels: list[float] = checked(default_factory=lambda: [0.89, 0.5, 0.23, 0.1],
                                           gt=0, lt=1)
    gpt_loss_tolerance: float = checked(0.02, gt=0)  # nats; ours, fixed before any run
    # Fig. 8 (model "random-mlp", :mod:`actlab.experiments.sparsity.topk_drift`): Top-K levels
    # beside plain GELU and the steps (ours: App. D.2's 5 epochs of 12,800 pairs)
    topk_drift_levels: list[float] = checked(default_factory=lambda: [0.5, 0.25, 0.1], gt=0,
                                             lt=1)
    topk_drift_steps: int = checked(500, ge=1)

    def check(self) -> None:
        """The CIFAR folder, enough points in all to fit the cliff, a warm-up within training,
        the GPT rows' scale."""
        check_cifar_dir(self.cifar_dir)
        self.check_paper_kinds([m for m in self.models if m not in (GPT, TOPK_DRIFT_MODEL)])
        classifiers = [m for m in self.frozen_models if m not in (GPT, TOPK_DRIFT_MODEL)]
        if classifiers and self.topk_freeze_after >= self.steps:
            raise ConfigError("topk_freeze_after", f"must be below steps={self.steps}, got "
                                                   f"{self.topk_freeze_after}")
        if GPT in self.frozen_models and self.topk_freeze_after >= self.gpt_steps:
            raise ConfigError("topk_freeze_after", f"must be below gpt_steps={self.gpt_steps}, "
                                                   f"got {self.topk_freeze_after}")
        if GPT in self.models:
            self.lm_scale()
        if len(self.percentile_levels) + len(self.topk_levels) < 3:
            raise ConfigError("percentile_levels", "need at least 3 points in all to fit the cliff")


def point_model_args(method: str, level: float, freeze_after: int | None = None) -> dict[str, Any]:
    """Activation spec and pre-activation norm of one (method, level) point; ``freeze_after``
    is the warm-up of ``topk-frozen``."""
    if method == "percentile":
        return {"activation": "relu", "pre_norm": f"percentile:q={level:g}", "norm_bias": False}
    if method == CHANNEL_METHOD:
        return {"activation": channel_spec(level), "pre_norm": None, "norm_bias": True}
    spec = f"gelu:topk={level:g}"
    if method == "topk-frozen":
        spec += f":freeze_after={freeze_after}"
    return {"activation": spec, "pre_norm": None, "norm_bias": True}


def gpt_point_args(method: str, level: float, freeze_after: int | None = None
                   ) -> dict[str, Any]:
    """:class:`~actlab.nn.gpt.GPTConfig` overrides of one GPT point: Percentile Centering per
    token before a ReLU (no learned shift), or GELU with (frozen-threshold) Top-K."""
    if method == "percentile":
        return {"activation": "relu", "mlp_norm": f"percentile:q={level:g}",
                "mlp_norm_bias": False}
    return {"activation": point_model_args(method, level, freeze_after)["activation"]}


def record_kept_fraction(model: Any) -> list[list[float]]:
    """Hooks on ``model``'s Top-K activations appending, at every training forward call, the
    share of non-zero outputs; one list per site (the hooks stay: the model is discarded)."""
    from actlab.activations.spec_activation import SpecActivation

    sites: list[list[float]] = []
    for module in model.modules():
        if isinstance(module, SpecActivation) and module.topk is not None:
            seen: list[float] = []
            sites.append(seen)
            module.register_forward_hook(
                lambda mod, inp, out, seen=seen: seen.append(float((out != 0).float().mean()))
                if mod.training else None)
    return sites


@register
class Sparsity(Experiment):
    """Accuracy vs controlled sparsity (Percentile Centering, Top-K) and the cliff fit."""

    name = "sparsity"
    headline_figure = "sparsity_cliff"
    description = ("Accuracy against Percentile-Centering and Top-K sparsity on MLP, MLP+skip, "
                   "ResNet and ViT (digits), with the a(s) = A - B s^N cliff fit, and a GPT's "
                   "loss against sparsity (\"Bug or Feature²\" §4, App. B.2)")
    Config = SparsityConfig
    quick = {"steps": 150, "percentile_levels": [0.5, 0.7, 0.85, 0.95],
             "topk_levels": [0.5, 0.2, 0.1, 0.03], "frozen_models": ["mlp", GPT],
             "topk_freeze_after": 30, "gpt_steps": 60, "gpt_n_layer": 1, "gpt_n_embd": 32,
             "gpt_block_size": 32, "gpt_batch_size": 8, "gpt_probe_batches": 2,
             "gpt_percentile_levels": [0.11, 0.77, 0.9], "gpt_topk_levels": [0.5, 0.1],
             "topk_drift_steps": 150, "channel_levels": [0.5, 0.03]}
    full = {"steps": 1500, "topk_freeze_after": 300}
    paper = SPARSITY
    default_seeds = 1
    seeds_per_unit = 1

    def units(self, config: SparsityConfig) -> list[dict[str, Any]]:
        """One unit per (model, method, level)."""
        def levels(model: str) -> tuple[list[float], list[float]]:
            if model == GPT:
                return config.gpt_percentile_levels, config.gpt_topk_levels
            return config.percentile_levels, config.topk_levels

        swept = [m for m in config.models if m != TOPK_DRIFT_MODEL]
        units = [{"model": model, "method": method, "level": level}
                 for model in swept
                 for method, method_levels in zip(("percentile", "topk"), levels(model))
                 for level in method_levels]
        units += [{"model": model, "method": "topk-frozen", "level": level}
                  for model in swept if model in config.frozen_models
                  for level in levels(model)[1]]
        units += [{"model": model, "method": CHANNEL_METHOD, "level": level}
                  for model in swept if model in CHANNEL_MODELS
                  for level in config.channel_levels]
        if TOPK_DRIFT_MODEL in config.models:  # Fig. 8: GELU + Top-K on random data
            units += drift_units(config.topk_drift_levels)
        return units

    def run_unit(self, config: SparsityConfig, unit: dict[str, Any], seeds: list[int],
                 ctx: UnitContext) -> UnitResult:
        """Train the point's model per seed; rows accuracy (the GPT: test_loss), neg_frac,
        sparsity."""
        from actlab.nn.classifiers import build_classifier

        run = f"{unit['model']}/{unit['method']}/{unit['level']:g}"
        if unit["model"] == TOPK_DRIFT_MODEL:
            return run_drift_unit(unit["level"], config.topk_drift_steps, seeds, ctx.progress)
        if unit["model"] == GPT:
            return run_gpt_cell(config.lm_scale(), run, seeds, ctx,
                                **gpt_point_args(unit["method"], unit["level"],
                                                 config.topk_freeze_after))
        result = UnitResult()
        data = load_config_data(config)
        settings = classifier_settings(config, unit["model"], len(data.x_train), topk=True)
        with torch_threads(config.threads):
            for seed in seeds:
                model = build_classifier(unit["model"], data, seed=seed, size=config.size,
                                         **point_model_args(unit["method"], unit["level"],
                                                            config.topk_freeze_after))
                kept = record_kept_fraction(model) if unit["method"] == "topk-frozen" else []
                out = fit_and_measure(model, data, settings, seed=seed, progress=ctx.progress)
                if out.status != STATUS_OK:
                    record_diverged(result, out.status, run, seed, out.steps)
                    continue
                for step, shares in enumerate(zip(*kept)):
                    result.add(run, seed, step + 1, "", "kept_fraction", sum(shares) / len(shares))
                for metric in ("accuracy", "neg_frac", "sparsity", "final_loss"):
                    result.add(run, seed, out.steps, "", metric if metric != "final_loss"
                               else "train_loss", getattr(out, metric))
        return result

    def workloads(self, config: SparsityConfig, unit: dict[str, Any]) -> list:
        """What one seed of a point trains (``actlab plan``)."""
        if unit["model"] == TOPK_DRIFT_MODEL:
            return drift_workloads(unit["level"], config.topk_drift_steps)
        if unit["model"] == GPT:  # the FFN's Percentile Centering adds no priced FLOPs
            from actlab.experiments.lm_paper import gpt_workloads

            args = gpt_point_args(unit["method"], unit["level"], config.topk_freeze_after)
            return gpt_workloads(config.lm_scale(), activation=args["activation"])
        return classifier_workloads(config, unit["model"], point_model_args(
            unit["method"], unit["level"], config.topk_freeze_after), topk=True)

    def summarize(self, config: SparsityConfig, table: pd.DataFrame, results: list[dict[str, Any]],
                  ctx: RunContext) -> dict:
        """Points, normalised accuracy, the cliff fit, figures."""
        summary = build_summary(config, table, results)
        if ctx.draw:  # the run's figures; not redrawn for each seed alone
            draw_figures(summary, ctx)
        return summary

    def claims(self, summary: dict) -> list[Claim]:
        """The cliff, the plateau, skip robustness, Percentile Centering sets the level, the
        frozen Top-K threshold matches exact Top-K; the GPT's flat loss and its rise at 90 %."""
        return summary_claims(summary)
