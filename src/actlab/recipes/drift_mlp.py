"""Recipe: train the bias-free MLP of "Bug or Feature²" (§2-3) and record how its weights drift.

:func:`train_drift_mlp` builds an :class:`~actlab.nn.mlp.MLP` (no biases, no norms) from a
:class:`DriftMLP` spec, initialises it from a generator seeded with ``seed`` (so models of
different activations start from the same weights), trains it with the engine
(:func:`actlab.train.supervised.train`, batch order seeded with ``seed`` as well) and has an
:class:`actlab.Probe` record per layer, at :func:`record_steps`, the metrics of
:data:`PROBE_METRICS`: the weight mean, the drift Z-score ``E|w_t - w_0| / std(w_0)``, the
mean gradient at the pre-activations and its covariance term, and the shares of negative
pre-activations and of zero activations. After a finished run it measures the activation
statistics on held-out inputs in eval mode (NoisyReLU then acts as ReLU) and, for
cross-entropy, the test accuracy. Nothing is written anywhere: the caller gets a
:class:`DriftRecord` and stores what it wants (:meth:`DriftRecord.rows` gives tidy-table
rows); :func:`describe_drift` reads such rows of one or more seeds into headline numbers.

Example::

    from actlab.data.random_pairs import random_pairs
    from actlab.train.settings import TrainSettings

    x, y = random_pairs(6400, 128, 10, seed=0)
    x_eval, _ = random_pairs(2048, 128, 10, seed=1)
    settings = TrainSettings(optimizer="sgd", lr=0.01, steps=400, batch_size=128,
                             loss="half_sse")
    record = train_drift_mlp(x, y, DriftMLP(in_dim=128, out_dim=10, activation="relu"),
                             settings, seed=0, record_every=50, x_eval=x_eval)
    record.status          # "ok" or "diverged"
    record.probe[:2]       # [(0, "layer1", "weight_mean", ...), ...]
    record.final["layer2"]["sparsity"]
    record.rows()          # the same as (step, layer, metric, value) table rows
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from actlab.analysis import at_step, change_per_layer, finite_or_none, layer_number, mean_value
from actlab.init import initialize_
from actlab.nn.mlp import MLP
from actlab.probe.probe import Probe
from actlab.recipes.image_classifier import activation_statistics
from actlab.train.loop import STATUS_DIVERGED
from actlab.train.settings import TrainSettings
from actlab.train.supervised import evaluate, train

PROBE_METRICS = ("weight_mean", "drift_z", "preact_grad_mean", "preact_grad_cov",
                 "preact_neg_frac", "sparsity")


@dataclass(frozen=True)
class DriftMLP:
    """The model of the recipe: :class:`~actlab.nn.mlp.MLP` arguments and the init scheme."""

    in_dim: int
    out_dim: int
    hidden: int = 128
    depth: int = 5
    activation: str = "relu"
    skip: bool = False
    init: str = "he"

    def build(self, seed: int) -> MLP:
        """The initialised model; the weights depend on ``seed`` only, not on the activation."""
        model = MLP(self.in_dim, self.out_dim, hidden=self.hidden, depth=self.depth,
                    activation=self.activation, skip=self.skip)
        initialize_(model, self.init, activation=self.activation,
                    generator=torch.Generator().manual_seed(seed))
        return model


@dataclass
class DriftRecord:
    """What one run of :func:`train_drift_mlp` measured.

    ``losses``: ``(step, batch loss)`` after 0-based update ``step``, every ``loss_every``
    updates and the last one; ``grad_norms``: ``(step, norm)`` of all weight gradients of
    that update together, at the same steps. ``probe``: ``(step, layer, metric, value)`` with ``layer`` the
    depth label (``layer1`` .. ``layer{depth+2}``), finite values only. ``final``: per depth
    label (``""`` for the mean over sites) the held-out ``preact_neg_frac`` and ``sparsity``;
    empty after a diverged run or without ``x_eval``. ``test_accuracy``: cross-entropy runs
    with labels only.
    """

    status: str
    steps: int
    model: MLP
    losses: list[tuple[int, float]] = field(default_factory=list)
    grad_norms: list[tuple[int, float]] = field(default_factory=list)
    probe: list[tuple[int, str, str, float]] = field(default_factory=list)
    final: dict[str, dict[str, float]] = field(default_factory=dict)
    test_accuracy: float | None = None

    def rows(self) -> list[tuple[int, str, str, float]]:
        """The record as ``(step, layer, metric, value)`` rows of a tidy table, ``layer`` ``""``
        for model-wide values: ``loss``, ``weight_grad_norm``, the probe's metrics, then ``final_neg_frac``,
        ``final_sparsity`` (and ``test_accuracy``) at the last step; a diverged run ends
        with a ``nan`` loss at the step it stopped instead."""
        out = [(step, "", "loss", value) for step, value in self.losses]
        out += [(step, "", "weight_grad_norm", value) for step, value in self.grad_norms]
        out += self.probe
        if self.status == STATUS_DIVERGED:
            return [*out, (self.steps, "", "loss", math.nan)]
        for layer, stats in self.final.items():
            out += [(self.steps, layer, "final_neg_frac", stats["preact_neg_frac"]),
                    (self.steps, layer, "final_sparsity", stats["sparsity"])]
        if self.test_accuracy is not None:
            out.append((self.steps, "", "test_accuracy", self.test_accuracy))
        return out


def record_steps(steps: int, every: int) -> list[int]:
    """Probe schedule: every ``every`` steps, plus the final weights."""
    return sorted(set(range(0, steps + 1, every)) | {steps})


def train_drift_mlp(x: Tensor, y: Tensor, spec: DriftMLP, settings: TrainSettings, *,
                    seed: int, record_every: int = 100, loss_every: int = 10,
                    x_eval: Tensor | None = None, y_eval: Tensor | None = None,
                    input_noise: float = 0.0,
                    progress: Callable[..., Iterable] | None = None) -> DriftRecord:
    """Train ``spec``'s MLP on ``(x, y)`` with ``settings`` and record its drift (module doc).

    ``input_noise`` > 0 adds fresh Gaussian noise of that standard deviation to every training
    batch's inputs (drawn from a generator seeded with ``seed``), so the network cannot
    memorise a small training set; held-out statistics see clean inputs.
    """
    torch.manual_seed(seed)  # noise of noisy_relu
    model = spec.build(seed)
    names = model.layer_names()
    probe = Probe(model, every=record_steps(settings.steps, record_every),
                  metrics=list(PROBE_METRICS))
    losses: list[tuple[int, float]] = []
    grad_norms: list[tuple[int, float]] = []

    def logged(step: int) -> bool:
        return step % loss_every == 0 or step == settings.steps - 1

    # The engine zeroes the gradients before on_step runs: hooks on the weights sum their
    # squares during the backward pass of a logged update instead.
    squares: list[Tensor] = []
    want = [logged(0)]

    def keep(grad: Tensor) -> None:
        if want[0]:
            squares.append(grad.detach().pow(2).sum())

    handles = [p.register_hook(keep) for p in model.parameters() if p.requires_grad]

    def on_step(step: int, value: float) -> None:
        probe.step()
        if logged(step):
            losses.append((step, value))
            if squares:
                grad_norms.append((step, float(torch.stack(squares).sum().sqrt())))
        squares.clear()
        want[0] = logged(step + 1)

    loss_fn = None
    if input_noise > 0:
        from actlab.nn.losses import get_loss

        criterion, noise = get_loss(settings.loss), torch.Generator().manual_seed(seed + 7919)

        def loss_fn(m: torch.nn.Module, batch: tuple[Tensor, Tensor]) -> Tensor:
            inputs, targets = batch
            jitter = torch.randn(inputs.shape, generator=noise, dtype=inputs.dtype)
            return criterion(m(inputs + input_noise * jitter.to(inputs.device)), targets)

    try:
        outcome = train(model, x, y, settings, generator=torch.Generator().manual_seed(seed),
                        on_step=on_step, progress=progress, loss_fn=loss_fn)
    finally:
        for handle in handles:
            handle.remove()
    table = probe.table()
    probe.close()
    record = DriftRecord(outcome.status, outcome.steps, model, losses, grad_norms)
    record.probe = [(int(r.step), names.get(r.layer, r.layer), r.metric, float(r.value))
                    for r in table.itertuples() if math.isfinite(r.value)]
    if outcome.status == STATUS_DIVERGED or x_eval is None:
        return record
    for layer, stats in activation_statistics(model, x_eval).items():
        record.final["" if layer == "mean" else names.get(layer, layer)] = stats
    if settings.loss == "cross_entropy" and y_eval is not None:
        record.test_accuracy = evaluate(model, x_eval, y_eval)["accuracy"]
    return record


def describe_drift(df: pd.DataFrame, last_hidden: int) -> dict[str, Any]:
    """Headline numbers of the rows of one model's runs, averaged over their seeds.

    ``df`` holds :meth:`DriftRecord.rows` with a ``seed`` column; ``last_hidden`` is the
    last hidden layer (``depth + 1``). ``mean_shift_*``: last minus first weight mean of
    layer 1, of the hidden layers 2..``last_hidden`` (averaged) and of the head;
    ``preact_grad_*``: the pre-activation gradient of the hidden sites at the first record
    (its mean, sign and covariance term) and over training; ``sparsity_start``/``_end``,
    the ``final_*`` eval statistics and ``test_accuracy``; ``drift_z_final`` of the hidden
    layers 2..; ``final_loss``: the mean loss of the last 50 steps. Missing or non-finite
    values are ``None``. ``grad_norm_peak_step``: the update whose weight-gradient norm
    (the seeds' mean) peaks; ``grad_norm_late_over_peak``: that curve's mean over the second
    half of training over its peak. ``mean_shift_at_fit``, ``fit_step``, ``fit_seeds``: the
    drift up to the step the training set is fitted (:func:`drift_at_fit`).
    """
    depth = df["layer"].map(layer_number)
    shifts = change_per_layer(df, "weight_mean")
    hidden_later = [v for k, v in shifts.items() if 2 <= layer_number(k) <= last_hidden]
    out: dict[str, Any] = {
        "mean_shift_first_layer": finite_or_none(shifts.get("layer1", math.nan)),
        "mean_shift_later_layers": (finite_or_none(float(np.mean(hidden_later)))
                                    if hidden_later else None),
        "mean_shift_output_layer": finite_or_none(shifts.get(f"layer{last_hidden + 1}", math.nan)),
        "mean_shift_per_layer": {k: finite_or_none(v) for k, v in
                                 sorted(shifts.items(), key=lambda kv: layer_number(kv[0]))},
    }
    hidden_sites = df[(depth >= 1) & (depth <= last_hidden)]
    grads = hidden_sites[hidden_sites["metric"] == "preact_grad_mean"]
    covs = hidden_sites[hidden_sites["metric"] == "preact_grad_cov"]
    if len(grads):
        first = grads["step"].min()
        g0 = mean_value(grads[grads["step"] == first])
        c0 = covs[covs["step"] == first]["value"].abs().mean() if len(covs) else math.nan
        out["preact_grad_mean_init"] = g0
        out["preact_grad_cov_init"] = finite_or_none(float(c0))
        out["preact_grad_mean_sign"] = None if g0 is None else int(np.sign(g0))
        out["preact_grad_mean_over_training"] = mean_value(grads)
    sp = hidden_sites[hidden_sites["metric"] == "sparsity"]
    if len(sp):
        out["sparsity_start"] = mean_value(at_step(sp, "first"))
        out["sparsity_end"] = mean_value(at_step(sp, "last"))
    for metric in ("final_sparsity", "final_neg_frac", "test_accuracy"):
        rows = df[(df["metric"] == metric) & (df["layer"] == "")]
        if len(rows):
            out[metric] = mean_value(rows)
    z = later_drift_z(df, last_hidden)
    if len(z):
        out["drift_z_final"] = mean_value(at_step(z, "last"))
    norms = df[(df["metric"] == "weight_grad_norm") & (df["layer"] == "")]
    if len(norms):
        # the seeds' mean curve: where its peak falls, and how far its second half decays
        curve = norms.groupby("step")["value"].mean()
        peak = float(curve.max())
        late = curve[curve.index >= curve.index.max() / 2]
        out["grad_norm_peak_step"] = int(curve.idxmax())
        out["grad_norm_late_over_peak"] = finite_or_none(float(late.mean()) / peak) \
            if peak > 0 else None
    loss = df[df["metric"] == "loss"].sort_values("step")
    if len(loss):
        out["final_loss"] = mean_value(loss[loss["step"] >= loss["step"].max() - 50])
    out.update(drift_at_fit(df, last_hidden))
    return out


def hidden_weight_means(df: pd.DataFrame, last_hidden: int) -> dict[Any, pd.Series]:
    """Per seed, the mean weight of the hidden layers 2..``last_hidden`` at each record
    (a series indexed by step)."""
    hidden = df["layer"].map(lambda k: 2 <= layer_number(k) <= last_hidden)
    weights = df[(df["metric"] == "weight_mean") & hidden]
    return {seed: part.groupby("step")["value"].mean() for seed, part in weights.groupby("seed")}


FIT_FRACTION = 0.01  # ours: "fitted" once the training loss falls below 1 % of its first value


def drift_at_fit(df: pd.DataFrame, last_hidden: int) -> dict[str, Any]:
    """The drift while the model still learns, apart from what follows once it has fitted
    its training set (on a small set, such as the digits, long before training ends).

    Per seed, the fit step is the first logged step whose training loss is below
    :data:`FIT_FRACTION` of the first logged loss; ``mean_shift_at_fit`` is the hidden layers
    2..``last_hidden``'s mean weight at the first weight record at or after it, minus their
    first, averaged over the seeds that fitted (``fit_seeds`` of them; ``fit_step``, their
    mean fit step). All ``None`` (``fit_seeds`` 0) when no seed fitted.
    """
    loss = df[df["metric"] == "loss"]
    hidden = hidden_weight_means(df, last_hidden)
    shifts, steps = [], []
    for seed, part in loss.groupby("seed"):
        part = part.sort_values("step")
        below = part[part["value"] < FIT_FRACTION * part["value"].iloc[0]]
        if below.empty or seed not in hidden:
            continue
        fit = int(below["step"].iloc[0])
        mean = hidden[seed]
        after = mean[mean.index >= fit]
        if after.empty:
            continue
        shifts.append(float(after.iloc[0] - mean.iloc[0]))
        steps.append(fit)
    if not shifts:
        return {"mean_shift_at_fit": None, "fit_step": None, "fit_seeds": 0}
    return {"mean_shift_at_fit": finite_or_none(float(np.mean(shifts))),
            "fit_step": float(np.mean(steps)), "fit_seeds": len(shifts)}


def later_drift_z(rows: pd.DataFrame, last_hidden: int) -> pd.DataFrame:
    """The drift Z-score rows of the hidden layers 2..``last_hidden`` (not input, not head)."""
    depth = rows["layer"].map(layer_number)
    return rows[(rows["metric"] == "drift_z") & (depth >= 2) & (depth <= last_hidden)]
