"""One GPT cell of a table whose other cells are classifiers on digits.

"Bug or Feature²" reports its GPT-nano beside its vision models in one table: Table 1 (an
activation's loss, negative pre-activation share and sparsity) and Tables 4/5 (the same three
under Percentile Centering and Top-K). Here a cell is a byte-level GPT trained with the
language-model recipe (Muon + AdamW by default, App. D.6); after training the probe measures,
on fixed validation windows, the share of negative activation inputs and the sparsity of the
activation output (``|a| < 1e-7``) per layer. The cell's rows are the final validation loss
(``test_loss``) and the two shares averaged over layers, as a classifier cell's rows are its
accuracy and shares.

:class:`GPTCellFields` holds the ``gpt_*`` config fields such an experiment adds;
:func:`run_gpt_cell` trains and measures one cell.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from actlab.config import CheckedConfig, checked
from actlab.errors import config_check
from actlab.recipes.image_classifier import record_diverged
from actlab.recipes.language_model import (
    LMScale,
    probe_forward,
    probe_windows,
    seeded_gpt,
    train_and_record,
)
from actlab.recipes.unit import STATUS_OK, UnitContext, UnitResult
from actlab.train.supervised import torch_threads


@dataclass
class GPTCellFields(CheckedConfig):
    """The GPT cells' scale: the language-model recipe at a size this CPU trains in minutes."""

    gpt_steps: int = checked(600, ge=1)
    gpt_n_layer: int = checked(4, ge=1)
    gpt_n_embd: int = checked(128, ge=1)
    gpt_block_size: int = checked(128, ge=2)
    gpt_batch_size: int = checked(32, ge=1)
    gpt_optimizer: str = "muon"
    gpt_data: str = "stdlib"
    gpt_probe_batches: int = checked(4, ge=1)

    def lm_scale(self, norm: str = "layernorm") -> LMScale:
        """The language-model scale of the GPT cells with the blocks' ``norm``."""
        return config_check("gpt_*", LMScale, data=self.gpt_data, n_layer=self.gpt_n_layer,
                            n_head=max(1, self.gpt_n_embd // 32), n_embd=self.gpt_n_embd,
                            block_size=self.gpt_block_size, batch_size=self.gpt_batch_size,
                            steps=self.gpt_steps, optimizer=self.gpt_optimizer, norm=norm,
                            eval_batches=self.gpt_probe_batches,
                            threads=getattr(self, "threads", 1), compile_model="off")


def run_gpt_cell(scale: LMScale, run: str, seeds: list[int], ctx: UnitContext,
                 **model: Any) -> UnitResult:
    """Train and measure the GPT of ``scale`` with the :class:`~actlab.nn.gpt.GPTConfig`
    overrides ``model`` (e.g. ``activation="relu"``, ``mlp_norm="percentile:q=0.7"``) once
    per seed; rows ``test_loss``, ``neg_frac``, ``sparsity`` under ``run``."""
    result = UnitResult()
    corpus = scale.corpus()
    with torch_threads(scale.threads or None):
        for seed in seeds:
            gpt = seeded_gpt(scale.model_config(**model), seed, ctx)
            outcome = train_and_record(scale, gpt, corpus, seed, ctx, result, run)
            if outcome.status != STATUS_OK:
                record_diverged(result, outcome.status, run, seed, outcome.step)
                continue
            losses = [r["val_loss"] for r in outcome.history if "val_loss" in r]
            result.add(run, seed, outcome.step, "", "test_loss", losses[-1])
            windows = probe_windows(scale, corpus, seed, scale.eval_batches, ctx)
            table = probe_forward(gpt, windows, metrics=("preact_neg_frac", "sparsity"))
            for metric, name in (("preact_neg_frac", "neg_frac"), ("sparsity", "sparsity")):
                values = table[table.metric == metric].value
                result.add(run, seed, outcome.step, "", name, float(np.mean(values)))
    return result
