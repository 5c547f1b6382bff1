"""``spikes``: squared and clipped activations and the range of the down-projection input
("Bug or Feature²", long version, §6 and App. B.3.1).

A GPT trains with each MLP activation (relu, gelu, relu2, gelu2, relu2:clip=15,
relu2:clip=50) for several seeds. After training, on fixed validation windows, the probe
measures per layer the range ``max - min`` of the activation output, which in a plain FFN is
exactly the down-projection's input (the paper's spike measure, §6), and its sparsity (share of
``|a| < 1e-7``) and share of negative pre-activations; as App. B.3.1 (Tables 7 and 8), also
the extremes of the attention and up-projection inputs and the standard deviation and extremes
of every block's weight matrices (:mod:`actlab.experiments.spikes.measures`). The validation
loss is recorded over training.

Two more conditions, off by default (:mod:`actlab.experiments.spikes.arms`): ``norms`` trains
``norm_activations`` under other normalisations (Fig. 6: spike ranges under RMSNorm against
centring and quantile norms), ``depth_layers`` trains ``depth_activations`` at that many
blocks of width ``depth_width`` (where in depth the spike sits).
"""

from __future__ import annotations

from dataclasses import dataclass

from actlab.errors import ConfigError
from actlab.experiments.lm_paper import GPT_NANO, gpt_workloads
from actlab.experiments.spikes import arms
from actlab.experiments.spikes.claims import claims
from actlab.experiments.spikes.figures import draw
from actlab.experiments.spikes.measures import (
    extreme_rows,
    recording_input_extremes,
    weight_extremes,
)
from actlab.experiments.spikes.summary import build_summary
from actlab.recipes.language_model import (
    LMScale,
    probe_forward,
    probe_windows,
    seeded_gpt,
    train_and_record,
)
from actlab.runner.experiment import (
    Claim,
    Experiment,
    RunContext,
    UnitContext,
    UnitResult,
    register,
)
from actlab.runner.fields import checked
from actlab.train.supervised import torch_threads

ACTIVATIONS = ["relu", "gelu", "relu2", "gelu2", "relu2:clip=15", "relu2:clip=50"]


@dataclass
class SpikesConfig(LMScale):
    """Tiny-GPT scale plus the activations compared, the measurement windows and the two
    optional arms (norms, depth; :mod:`actlab.experiments.spikes.arms`)."""

    activations: list[str] = checked(default_factory=lambda: list(ACTIVATIONS),
                                     spec="activation", nonempty=True)
    probe_batches: int = checked(4, ge=1)
    # the norm arm: normalisations besides ``norm`` (empty: no arm), and what trains under them
    norms: list[str] = checked(default_factory=list, spec="norm")
    norm_activations: list[str] = checked(default_factory=lambda: ["relu2"],
                                          spec="activation", nonempty=True)
    # the depth arm: blocks (0: no arm), their width, and what trains at that depth
    depth_layers: int = checked(0, ge=0)
    depth_width: int = checked(64, ge=1)
    depth_activations: list[str] = checked(default_factory=lambda: ["relu", "relu2"],
                                           spec="activation", nonempty=True)

    def check(self) -> None:
        """The base and every arm's model build (a bad norm or width names its field)."""
        super().check()
        for norm in self.norms:
            self.model_config(norm=norm)
        if self.depth_layers:
            if self.model != "custom":  # a preset's shape would overwrite the arm's
                raise ConfigError("depth_layers", f"the depth arm needs model='custom' (its "
                                                  f"own shape), got model={self.model!r}")
            if self.depth_width % self.n_head:
                raise ConfigError("depth_width", f"must be a multiple of n_head={self.n_head}, "
                                                 f"got {self.depth_width}")
            self.model_config(n_layer=self.depth_layers, n_embd=self.depth_width)


@register
class SpikesExperiment(Experiment):
    """Down-projection input range per layer for plain, squared and clipped activations."""

    name = "spikes"
    headline_figure = "spikes"
    description = ("GPT with relu, gelu, relu2, gelu2, relu2 clipped at 15/50, 3 seeds: per-layer "
                   "range of the down-projection input, val loss, sparsity (\"Bug or Feature²\" "
                   "§6).")
    Config = SpikesConfig
    # The gpt-nano recipe scales warm-up, warm-down and evaluation with ``steps``; the quick
    # runs before it: --set steps=160 --set optimizer=adamw --set lr=0.003 --set warmup=16 --set eval_every=40
    quick = {"compile_model": "off",
             "n_layer": 4, "n_embd": 64, "block_size": 64, "batch_size": 16, "steps": 128,
             "eval_batches": 4}
    paper = GPT_NANO
    default_seeds = 3
    seeds_per_unit = 1

    def units(self, config: SpikesConfig) -> list[dict]:
        """One unit per activation, then the norm and depth arms' units (if any)."""
        return arms.units(config)

    def workloads(self, config: SpikesConfig, unit: dict) -> list:
        """The activation's GPT (at the unit's norm or shape) with its validation
        (``actlab plan``)."""
        return gpt_workloads(arms.unit_scale(config, unit), activation=unit["activation"])

    def run_unit(self, config: SpikesConfig, unit: dict, seeds: list[int],
                 ctx: UnitContext) -> UnitResult:
        """Train with one activation per seed; measure ranges on validation windows at the end."""
        result = UnitResult()
        spec = unit["activation"]
        scale = arms.unit_scale(config, unit)
        run = arms.run_name(config, unit)
        corpus = config.corpus()
        with torch_threads(config.threads or None):
            for seed in seeds:
                model = seeded_gpt(scale.model_config(activation=spec), seed, ctx)
                outcome = train_and_record(scale, model, corpus, seed, ctx, result, run)
                if outcome.status != "ok":
                    continue
                windows = probe_windows(config, corpus, seed, config.probe_batches, ctx)
                with recording_input_extremes(model) as extremes:  # during the probe's pass
                    table = probe_forward(model, windows,
                                          metrics=("act_range", "act_max", "act_min",
                                                   "sparsity", "preact_neg_frac"))
                for row in table.itertuples():
                    layer = row.layer.split(".")[1]  # "blocks.<i>.mlp.act" -> "<i>"
                    result.add(run, seed, outcome.step, layer, row.metric, row.value)
                for layer, metric, value in (*extreme_rows(extremes), *weight_extremes(model)):
                    result.add(run, seed, outcome.step, layer, metric, value)
        return result

    def summarize(self, config: SpikesConfig, table, results: list[dict], ctx: RunContext) -> dict:
        """Per activation: val loss mean/sd, per-layer max (over seeds) and mean range, sparsity."""
        summary = build_summary(config, table, results)
        if ctx.draw:  # the run's figures; not redrawn for each seed alone
            draw(summary, ctx)
        return summary

    def claims(self, summary: dict) -> list[Claim]:
        """§6 / Table 6 and Fig. 16 of "Bug or Feature²", judged on the summary."""
        return claims(summary)
