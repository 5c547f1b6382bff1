"""``drift-theory``: the weight-drift theorems of "Bug or Feature²" checked by Monte Carlo.

"Bug or Feature²" (long version §2, Theorems 2.1–2.3, App. A.1–A.3; the short version's
Theorems 1.1–1.3) proves why the pre-activation gradient is positive in expectation at
initialisation, but its displayed equations are lost from the text we have. docs/theory.md
derives the closed forms of :mod:`actlab.theory.drift` from the stated assumptions; each
unit estimates the same quantities by Monte Carlo with standard errors
(:mod:`.montecarlo`), one part per unit:

* ``plain`` (once per entry of ``classes``): layer ``l`` has ``width`` units with fixed
  pre-activations ``p ~ N(0, 1)``; gated layers ``hidden`` and a ``C``-way head follow, with
  Gaussian weights of variance ``gain / fan_in``. ``samples`` draws of those weights give
  ``E[V]`` and ``E⟨v_i, v_j⟩`` (Theorem 2.1), the MSE gradient (Theorem 2.2, autograd) and
  the cross-entropy gradient at output scale ``eps`` and ``2 eps`` (Theorem 2.3 and its
  correction order, App. A.2);
* ``skip``: the stream ``z = a + relu(p)`` with a signed bypass ``a ~ N(0, 1)`` passes one
  residual block ``z + relu(W z)`` (the drift MLP's skip block) and the head (App. A.3);
* ``skewed``: a 2-unit layer and one gated layer whose weights are zero-mean but not
  sign-symmetric (Theorem 2.1's cross-correlation sign; exact value by enumeration);
* ``covariance-theory``: MSE MLPs whose input projection is orthogonal, so the second
  layer's inputs are ``relu`` of i.i.d. Gaussians: the covariance term of App. A.1 against
  its exact ratio to the mean term;
* ``covariance``: the paper's CIFAR-10 MLP shape (App. D.2: input 3072, width 1024, five
  hidden blocks, 10 classes, cross-entropy) at He initialisation on Gaussian inputs: the
  covariance term against the mean term in every layer (§3, Fig. 3(b)).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from actlab.errors import ConfigError
from actlab.experiments.drift_theory.claims import claims as drift_theory_claims
from actlab.experiments.drift_theory.figures import draw_figures
from actlab.experiments.drift_theory.parts import PARTS, run_label, run_part
from actlab.experiments.drift_theory.summary import build_summary
from actlab.runner.experiment import (
    Claim,
    Experiment,
    RunContext,
    UnitContext,
    UnitResult,
    register,
)
from actlab.runner.fields import CheckedConfig, checked
from actlab.train.supervised import torch_threads


@dataclass
class DriftTheoryConfig(CheckedConfig):
    """Sizes and Monte Carlo budgets of each part (see the module docstring)."""

    parts: list[str] = checked(default_factory=lambda: list(PARTS), choices=PARTS, nonempty=True)
    classes: list[int] = checked(default_factory=lambda: [10, 2], ge=2, nonempty=True)
    width: int = checked(32, ge=2)
    hidden: list[int] = checked(default_factory=lambda: [48, 24], ge=1, nonempty=True)
    gain: float = checked(2.0, gt=0)
    samples: int = checked(40000, ge=100)
    chunk: int = checked(2048, ge=1)
    eps: float = checked(0.125, gt=0)
    skewed_hidden: int = checked(16, ge=1)
    theory_width: int = checked(128, ge=2)
    theory_networks: int = checked(256, ge=2)
    theory_batch: int = checked(2048, ge=2)
    cov_in_dim: int = checked(3072, ge=1)
    cov_width: int = checked(1024, ge=2)
    cov_blocks: int = checked(5, ge=1)
    cov_classes: int = checked(10, ge=2)
    cov_networks: int = checked(32, ge=2)
    cov_batch: int = checked(512, ge=2)
    k: float = checked(4.0, gt=0)
    threads: int = checked(1, ge=1)

    def check(self) -> None:
        """The estimates need at least two draws per chunk and a finite output scale."""
        if self.chunk > self.samples:
            raise ConfigError("chunk", f"must be <= samples ({self.samples}), got {self.chunk}")
        if self.eps > 1.0:
            raise ConfigError(
                "eps", f"the softmax is linearised at small outputs; must be <= 1, got {self.eps}"
            )


@register
class DriftTheory(Experiment):
    """The drift theorems (Theorems 2.1–2.3, App. A.1–A.3) against their Monte Carlo estimates."""

    name = "drift-theory"
    description = (
        'The weight-drift theorems of "Bug or Feature²" (§2, App. A): closed forms '
        "derived from their assumptions against Monte Carlo estimates with errors"
    )
    headline_figure = "gradients"
    Config = DriftTheoryConfig
    quick = {
        "samples": 10000,
        "theory_networks": 32,
        "theory_batch": 1024,
        "cov_in_dim": 1024,
        "cov_networks": 8,
        "cov_batch": 256,
    }
    full = {"samples": 200000, "theory_networks": 1024, "cov_networks": 64}
    default_seeds = 1
    seeds_per_unit = 1

    def units(self, config: DriftTheoryConfig) -> list[dict[str, Any]]:
        """One unit per part (``plain`` once per number of classes)."""
        units: list[dict[str, Any]] = []
        for part in config.parts:
            if part == "plain":
                units += [{"part": "plain", "classes": int(c)} for c in config.classes]
            else:
                units.append({"part": part})
        return units

    def run_unit(
        self, config: DriftTheoryConfig, unit: dict[str, Any], seeds: list[int], ctx: UnitContext
    ) -> UnitResult:
        """The unit's part for each seed (the seed draws the fixed state and the weights)."""
        result = UnitResult()
        with torch_threads(config.threads):  # the batched products are small; threads spin
            for seed in seeds:
                for layer, metric, value in run_part(config, unit, seed):
                    result.add(run_label(unit), seed, 0, layer, metric, value)
        return result

    def summarize(
        self,
        config: DriftTheoryConfig,
        table: pd.DataFrame,
        results: list[dict[str, Any]],
        ctx: RunContext,
    ) -> dict:
        """Per part and seed the estimates, their errors and the closed forms; the figures."""
        summary = build_summary(config, table)
        if ctx.draw:  # the run's figures; not redrawn for each seed alone
            draw_figures(summary, ctx)
        return summary

    def claims(self, summary: dict) -> list[Claim]:
        """See ``claims.py``."""
        return drift_theory_claims(summary)
