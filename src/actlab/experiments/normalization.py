"""``normalization``: weight-gradient norms of badly initialized 20 x 64 stacks, plain and repaired.

Seed 001, "Normalization and residual connections": 20 hidden layers of 64 units, inputs of
width 64 drawn standard normal (500 of them), standard normal targets, identity output and
the half squared error averaged over the batch, at initialization in float64. Two bad
scales, each as a plain stack, with batch normalization (batch statistics, as in training),
with layer normalization, and with residual connections ``a_l = a_{l-1} + f(z_l)``:

* tanh with every weight of standard deviation 0.01 (the gradient vanishes);
* ReLU with twice He's standard deviation (it explodes).

Recorded: the Frobenius norm of the weight gradient of every hidden layer; the summary
keeps the first and the last hidden layer's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from actlab.data.spirals import data_seed
from actlab.errors import ConfigError
from actlab.experiments._common import require_at_least_one
from actlab.measure.signal import half_squared_error, weight_grad_norms
from actlab.nn.deep_mlp import deep_mlp
from actlab.plotting import pyplot
from actlab.runner.claims import claim_id
from actlab.runner.experiment import (
    Claim,
    Experiment,
    RunContext,
    UnitContext,
    UnitResult,
    register,
)

# stack -> (activation, init keyword arguments)
STACKS = {"tanh-std0.01": ("tanh", {"scheme": "std", "std": 0.01}),
          "relu-2he": ("relu", {"scheme": "he", "gain": 2 * math.sqrt(2.0)})}
VARIANTS = {"plain": (None, False), "batch-norm": ("batch", False),
            "layer-norm": ("layer", False), "residual": (None, True)}
# The handbook's (first, last) hidden-layer norms where it gives them.
PUBLISHED = {
    ("tanh-std0.01", "plain"): (4.1e-23, None),
    ("tanh-std0.01", "batch-norm"): (2.08, None),
    ("tanh-std0.01", "layer-norm"): (1.75, None),
    ("tanh-std0.01", "residual"): (4.3e-2, None),
    ("relu-2he", "plain"): (1.9e11, 1.2e12),
    ("relu-2he", "residual"): (9.5e15, 2.2e17),
}
NORMALIZED_RANGE = (0.49, 26.5)  # ReLU at 2 x He with batch or layer norm, first and last


@dataclass
class NormalizationConfig:
    """Size of the stacks and of the batch."""

    width: int = 64
    depth: int = 20
    n_inputs: int = 500

    def __post_init__(self) -> None:
        require_at_least_one(self, ("width", "depth", "n_inputs"))
        if self.n_inputs < 2:
            raise ConfigError("n_inputs", "batch norm needs at least 2 inputs")


@register
class NormalizationExperiment(Experiment):
    """First- and last-layer gradient norms of plain, normalized and residual stacks."""

    name = "normalization"
    headline_figure = "normalization"
    description = ("20x64 stacks (tanh std 0.01, ReLU 2xHe): plain, batch norm, layer norm, "
                   "residual; first/last weight-gradient norms at initialization (seed 001).")
    Config = NormalizationConfig
    quick: dict = {}  # seconds: quick is the full protocol
    default_seeds = 1
    seeds_per_unit = 1

    def units(self, config: NormalizationConfig) -> list[dict]:
        """One unit per bad scale."""
        return [{"stack": stack} for stack in STACKS]

    def run_unit(self, config: NormalizationConfig, unit: dict, seeds: list[int],
                 ctx: UnitContext) -> UnitResult:
        """Gradient norms of every hidden layer for the four variants of one stack."""
        result = UnitResult()
        activation, init = STACKS[unit["stack"]]
        for seed in seeds:
            generator = torch.Generator().manual_seed(data_seed(seed))
            x = torch.randn(config.n_inputs, config.width, generator=generator, dtype=torch.float64)
            y = torch.randn(config.n_inputs, 1, generator=generator, dtype=torch.float64)
            for variant, (norm, residual) in VARIANTS.items():
                model = deep_mlp(config.width, config.width, config.depth, 1,
                                 activation=activation, norm=norm, residual=residual, seed=seed,
                                 **init)
                model.train()  # batch norm with batch statistics, as in training
                norms = weight_grad_norms(model, x, y, cost=half_squared_error,
                                          layers=list(model.hidden))
                for layer, value in enumerate(norms, start=1):
                    result.add(f"{unit['stack']}/{variant}", seed, 0, str(layer), "grad_norm",
                               value)
        return result

    def summarize(self, config: NormalizationConfig, table, results: list[dict],
                  ctx: RunContext) -> dict:
        """First and last hidden layer's gradient norm per stack and variant (first seed)."""
        seed = int(table["seed"].min())
        rows = table[(table["seed"] == seed) & (table["metric"] == "grad_norm")]
        summary: dict = {"seed": seed}
        curves = {}
        for stack in STACKS:
            summary[stack] = {}
            for variant in VARIANTS:
                sel = rows[rows["run"] == f"{stack}/{variant}"]
                values = sel.assign(l=sel["layer"].astype(int)).sort_values("l")["value"].tolist()
                curves[(stack, variant)] = values
                summary[stack][variant] = {"first": values[0], "last": values[-1]}
        _figure(curves, ctx)
        return summary

    def claims(self, summary: dict) -> list[Claim]:
        """Published norms within a factor of 3 (one random network each), and the ordering."""
        src = "seed 001, Normalization and residual connections"
        out = []
        for (stack, variant), (first, last) in PUBLISHED.items():
            got = summary[stack][variant]
            held = _within(got["first"], first) and (last is None or _within(got["last"], last))
            text = f"{stack} {variant}: first-layer norm {first:.2g}"
            measured = f"{got['first']:.3g}"
            if last is not None:
                text += f", last {last:.2g}"
                measured += f", {got['last']:.3g}"
            out.append(Claim(text + " (within a factor of 3)", measured, held, src,
                             id=claim_id(self.name, stack, variant, "norms-match-handbook"),
                             value=got["first"], comparison="compound", threshold=3.0,
                             reference=first))
        normed = [summary["relu-2he"][v][k] for v in ("batch-norm", "layer-norm")
                  for k in ("first", "last")]
        lo, hi = NORMALIZED_RANGE
        out.append(Claim(f"relu-2he with batch or layer norm: norms between {lo} and {hi} "
                         "(range widened 3x each way)", f"{min(normed):.3g}..{max(normed):.3g}",
                         min(normed) >= lo / 3 and max(normed) <= hi * 3, src,
                         id=claim_id(self.name, "relu-2he", "normed", "norms-in-range"),
                         value=max(normed), comparison="compound", threshold=hi * 3))
        plain, res = summary["relu-2he"]["plain"], summary["relu-2he"]["residual"]
        out.append(Claim("relu-2he: residual blocks alone make the norms larger still",
                         f"residual {res['first']:.3g}/{res['last']:.3g} vs plain "
                         f"{plain['first']:.3g}/{plain['last']:.3g}",
                         res["first"] > plain["first"] and res["last"] > plain["last"], src,
                         id=claim_id(self.name, "relu-2he", "residual", "norms-larger"),
                         value=res["last"], comparison="compound", threshold=plain["last"]))
        return out


def _within(value: float, target: float, factor: float = 3.0) -> bool:
    return math.isfinite(value) and target / factor <= value <= target * factor


def _figure(curves: dict, ctx: RunContext) -> None:
    plt = pyplot()

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for ax, stack in zip(axes, STACKS):
        for i, variant in enumerate(VARIANTS):
            values = curves[(stack, variant)]
            ax.semilogy(range(1, len(values) + 1), values, color=f"C{i}", label=variant)
        ax.set_title(stack)
        ax.set_xlabel("hidden layer")
        ax.set_ylabel("weight-gradient norm")
        ax.legend()
    ctx.save_figure(fig, "normalization")
