"""The drift MLP recipe against references: a plain PyTorch loop with the same start and batch
order, its saved weights (weight mean, drift Z-score), and hand-computed eval statistics."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from actlab.recipes.drift_mlp import DriftMLP, describe_drift, record_steps, train_drift_mlp
from actlab.train.settings import TrainSettings

STEPS, BATCH, EVERY = 12, 16, 4


pytestmark = pytest.mark.usefixtures("one_thread")


def _data(n: int = 64, in_dim: int = 8, out_dim: int = 3, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, in_dim, generator=g), torch.randn(n, out_dim, generator=g)


def _plain_loop(spec: DriftMLP, x, y, seed: int, lr: float, momentum: float):
    """SGD(+momentum) on half squared error, seeded epochs of a permutation (last partial
    batch dropped); the weights of every layer after each update, and the batch losses."""
    model = spec.build(seed)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    g = torch.Generator().manual_seed(seed)
    layers = model.linear_layers()
    saved = {0: {k: m.weight.detach().clone() for k, m in layers.items()}}
    losses, norms, order, pos = [], [], None, 0
    for step in range(1, STEPS + 1):
        if order is None or pos + BATCH > len(x):
            order, pos = torch.randperm(len(x), generator=g), 0
        idx = order[pos:pos + BATCH]
        pos += BATCH
        loss = 0.5 * (model(x[idx]) - y[idx]).pow(2).sum(1).mean()
        opt.zero_grad()
        loss.backward()
        norms.append(float(torch.cat([p.grad.flatten() for p in model.parameters()]).norm()))
        opt.step()
        losses.append(float(loss.detach()))
        saved[step] = {k: m.weight.detach().clone() for k, m in layers.items()}
    return model, saved, losses, norms


def test_record_steps_include_the_end():
    assert record_steps(10, 4) == [0, 4, 8, 10]
    assert record_steps(8, 4) == [0, 4, 8]


def test_initial_weights_depend_on_the_seed_not_the_activation():
    relu, tanh = DriftMLP(8, 3, hidden=16, depth=2).build(1), DriftMLP(
        8, 3, hidden=16, depth=2, activation="tanh").build(1)
    other = DriftMLP(8, 3, hidden=16, depth=2).build(2)
    for (name, a), b, c in zip(relu.state_dict().items(), tanh.state_dict().values(),
                               other.state_dict().values()):
        assert torch.equal(a, b), name
        assert not torch.equal(a, c), name
    assert relu.head.bias is None and relu.input.linear.bias is None  # bias-free


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_drift_and_losses_equal_a_plain_loop_and_its_saved_weights(momentum):
    x, y = _data()
    spec = DriftMLP(8, 3, hidden=16, depth=2)
    optimizer = "momentum" if momentum else "sgd"
    settings = TrainSettings(optimizer=optimizer, lr=0.05, momentum=0.9, steps=STEPS,
                             batch_size=BATCH, loss="half_sse")
    record = train_drift_mlp(x, y, spec, settings, seed=3, record_every=EVERY, loss_every=5,
                             x_eval=x)
    model, saved, losses, norms = _plain_loop(spec, x, y, 3, 0.05, momentum)
    assert record.status == "ok" and record.steps == STEPS
    for a, b in zip(record.model.parameters(), model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    # batch losses after 0-based updates 0, 5, 10 and the last
    assert [s for s, _ in record.losses] == [0, 5, 10, STEPS - 1]
    for step, value in record.losses:
        assert value == pytest.approx(losses[step], rel=1e-5)
    # the norm of all weight gradients of the same updates (the plain loop's autograd)
    assert [s for s, _ in record.grad_norms] == [0, 5, 10, STEPS - 1]
    for step, value in record.grad_norms:
        assert value == pytest.approx(norms[step], rel=1e-5)
    probe = {(s, layer, m): v for s, layer, m, v in record.probe}
    for step in record_steps(STEPS, EVERY):
        for layer, w in saved[step].items():
            w0 = saved[0][layer]
            drift_z = float((w - w0).abs().mean() / w0.std(unbiased=False))
            assert probe[(step, layer, "drift_z")] == pytest.approx(drift_z, rel=1e-4, abs=1e-7)
            assert probe[(step, layer, "weight_mean")] == pytest.approx(float(w.mean()),
                                                                        rel=1e-4, abs=1e-7)
    assert probe[(STEPS, "layer2", "drift_z")] > 0
    assert {s for s, *_ in record.probe} == set(record_steps(STEPS, EVERY))


def test_final_statistics_equal_a_hand_forward_pass():
    x, y = _data()
    spec = DriftMLP(8, 3, hidden=16, depth=2)
    settings = TrainSettings(optimizer="sgd", lr=0.05, steps=4, batch_size=BATCH, loss="half_sse")
    record = train_drift_mlp(x, y, spec, settings, seed=0, record_every=2, x_eval=x[:40])
    model, h = record.model, x[:40]
    expected = {}
    with torch.no_grad():
        for label, block in [("layer1", model.input), *((f"layer{i + 2}", b)
                                                       for i, b in enumerate(model.blocks))]:
            z = block.linear(h)
            h = torch.relu(z)
            expected[label] = float((z < 0).double().mean())
    assert set(record.final) == {"", *expected}
    for label, neg in expected.items():
        assert record.final[label]["preact_neg_frac"] == pytest.approx(neg, abs=1e-9)
        # ReLU's zeros are exactly its negative inputs
        assert record.final[label]["sparsity"] == pytest.approx(neg, abs=1e-9)
    assert record.final[""]["sparsity"] == pytest.approx(sum(expected.values()) / 3)
    assert record.test_accuracy is None  # regression: no accuracy


def test_cross_entropy_reports_the_test_accuracy():
    x, _ = _data(n=48)
    labels = (x[:, 0] > 0).long()
    spec = DriftMLP(8, 2, hidden=16, depth=1, activation="gelu")
    settings = TrainSettings(optimizer="adam", lr=1e-2, steps=6, batch_size=BATCH)
    record = train_drift_mlp(x, labels, spec, settings, seed=0, record_every=3, x_eval=x,
                             y_eval=labels)
    record.model.eval()
    with torch.no_grad():
        accuracy = float((record.model(x).argmax(-1) == labels).double().mean())
    assert record.test_accuracy == pytest.approx(accuracy)
    assert record.rows()[-1] == (6, "", "test_accuracy", record.test_accuracy)


def test_a_diverging_run_is_recorded_not_raised():
    x, y = _data()
    settings = TrainSettings(optimizer="sgd", lr=1e6, steps=STEPS, batch_size=BATCH,
                             loss="half_sse")
    record = train_drift_mlp(x, y, DriftMLP(8, 3, hidden=16, depth=2), settings, seed=0,
                             record_every=EVERY, x_eval=x)
    assert record.status == "diverged" and record.steps < STEPS
    assert record.final == {} and record.test_accuracy is None
    assert all(math.isfinite(v) for *_, v in record.probe)
    last = record.rows()[-1]
    assert last[:3] == (record.steps, "", "loss") and math.isnan(last[3])


def test_describe_drift_averages_the_saved_weights_over_seeds():
    x, y = _data()
    spec = DriftMLP(8, 3, hidden=16, depth=2)
    settings = TrainSettings(optimizer="momentum", lr=0.05, steps=STEPS, batch_size=BATCH,
                             loss="half_sse")
    records = {seed: train_drift_mlp(x, y, spec, settings, seed=seed, record_every=EVERY,
                                     x_eval=x) for seed in (0, 1)}
    table = pd.DataFrame([(seed, *row) for seed, r in records.items() for row in r.rows()],
                         columns=["seed", "step", "layer", "metric", "value"])
    summary = describe_drift(table, last_hidden=spec.depth + 1)
    shift, z = {}, []
    for seed, record in records.items():
        start = spec.build(seed).linear_layers()
        for name, layer in record.model.linear_layers().items():
            w, w0 = layer.weight.detach(), start[name].weight.detach()
            shift.setdefault(name, []).append(float(w.mean() - w0.mean()))
            if 2 <= int(name[5:]) <= spec.depth + 1:
                z.append(float((w - w0).abs().mean() / w0.std(unbiased=False)))
    mean = {k: sum(v) / len(v) for k, v in shift.items()}
    for name, value in mean.items():
        assert summary["mean_shift_per_layer"][name] == pytest.approx(value, rel=1e-4, abs=1e-8)
    assert summary["mean_shift_first_layer"] == pytest.approx(mean["layer1"], rel=1e-4)
    assert summary["mean_shift_output_layer"] == pytest.approx(mean["layer4"], rel=1e-4)
    assert summary["mean_shift_later_layers"] == pytest.approx(
        (mean["layer2"] + mean["layer3"]) / 2, rel=1e-4)
    assert summary["drift_z_final"] == pytest.approx(sum(z) / len(z), rel=1e-4)
    losses = [v for r in records.values() for _, v in r.losses]
    assert summary["final_loss"] == pytest.approx(sum(losses) / len(losses), rel=1e-6)
    sparsity = [r.final[""]["sparsity"] for r in records.values()]
    assert summary["final_sparsity"] == pytest.approx(sum(sparsity) / 2)
    assert summary["preact_grad_mean_sign"] in (-1, 0, 1)


def test_input_noise_perturbs_training_batches_only():
    x, y = _data()
    spec = DriftMLP(8, 3, hidden=16, depth=2)
    settings = TrainSettings(optimizer="sgd", lr=0.05, steps=6, batch_size=BATCH, loss="half_sse")
    clean = train_drift_mlp(x, y, spec, settings, seed=0, record_every=3, loss_every=1, x_eval=x)
    noisy = train_drift_mlp(x, y, spec, settings, seed=0, record_every=3, loss_every=1, x_eval=x,
                            input_noise=0.5)
    again = train_drift_mlp(x, y, spec, settings, seed=0, record_every=3, loss_every=1, x_eval=x,
                            input_noise=0.5)
    # same initial weights and first batch: the first loss differs only by the noise
    assert noisy.losses[0][1] != pytest.approx(clean.losses[0][1], rel=1e-3)
    assert noisy.losses == again.losses  # the noise is seeded
    assert set(noisy.final) == set(clean.final)  # held-out statistics on clean inputs


def test_drift_at_fit_reads_the_hidden_weights_at_the_first_record_after_the_fit():
    from actlab.recipes.drift_mlp import FIT_FRACTION, drift_at_fit

    rows = []
    # seed 0 fits at step 20 (its loss 0.01 there is below 1 % of 2.0); records every 25 steps;
    # seed 1 never falls below 1 % of its first loss
    for seed, losses in ((0, [2.0, 1.0, FIT_FRACTION, 0.5 * FIT_FRACTION, 0.0]),
                         (1, [2.0, 1.9, 1.8, 1.7, 1.6])):
        rows += [(seed, 10 * i, "", "loss", v) for i, v in enumerate(losses)]
    for step, (w1, w2, w3, w4) in ((0, (5.0, 1.0, 3.0, 9.0)), (25, (7.0, 0.5, 2.0, 9.5)),
                                   (50, (9.0, -1.0, 0.0, 3.0))):
        rows += [(seed, step, layer, "weight_mean", w)
                 for seed in (0, 1) for layer, w in (("layer1", w1), ("layer2", w2),
                                                     ("layer3", w3), ("layer4", w4))]
    table = pd.DataFrame(rows, columns=["seed", "step", "layer", "metric", "value"])
    out = drift_at_fit(table, last_hidden=3)  # hidden layers 2..3; layers 1 and 4 left out
    # the first record at or after step 20 is step 25's
    assert out == {"mean_shift_at_fit": pytest.approx((0.5 + 2.0) / 2 - (1.0 + 3.0) / 2),
                   "fit_step": 20.0, "fit_seeds": 1}
    never = drift_at_fit(table[table["seed"] == 1], last_hidden=3)
    assert never == {"mean_shift_at_fit": None, "fit_step": None, "fit_seeds": 0}
