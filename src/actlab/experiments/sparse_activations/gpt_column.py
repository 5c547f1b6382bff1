"""The GPT column of ``sparse-activations`` (Table 1's GPT-nano column of "Bug or Feature²").

One cell: a byte-level GPT with the cell's activation trains with the language-model recipe,
then on fixed validation windows the probe measures, per layer, the share of negative
activation inputs and the sparsity of the activation output (``|a| < 1e-7``, as §4 measures
it: at the activation's output only). The cell's rows are the final validation loss
(``test_loss``) and the two shares averaged over layers, as the classifier cells' rows.
"""

from __future__ import annotations

import numpy as np

from actlab.recipes.image_classifier import record_diverged
from actlab.recipes.language_model import (
    LMScale,
    probe_forward,
    probe_windows,
    seeded_gpt,
    train_and_record,
)
from actlab.runner.experiment import STATUS_OK, UnitContext, UnitResult
from actlab.train.supervised import torch_threads


def run_gpt_cell(scale: LMScale, activation: str, run: str, seeds: list[int],
                 ctx: UnitContext) -> UnitResult:
    """Train and measure the GPT with ``activation`` once per seed (rows under ``run``)."""
    result = UnitResult()
    corpus = scale.corpus()
    with torch_threads(scale.threads or None):
        for seed in seeds:
            model = seeded_gpt(scale.model_config(activation=activation), seed, ctx)
            outcome = train_and_record(scale, model, corpus, seed, ctx, result, run)
            if outcome.status != STATUS_OK:
                record_diverged(result, outcome.status, run, seed, outcome.step)
                continue
            losses = [r["val_loss"] for r in outcome.history if "val_loss" in r]
            result.add(run, seed, outcome.step, "", "test_loss", losses[-1])
            windows = probe_windows(scale, corpus, seed, scale.eval_batches, ctx)
            table = probe_forward(model, windows, metrics=("preact_neg_frac", "sparsity"))
            for metric, name in (("preact_neg_frac", "neg_frac"), ("sparsity", "sparsity")):
                values = table[table.metric == metric].value
                result.add(run, seed, outcome.step, "", name, float(np.mean(values)))
    return result
