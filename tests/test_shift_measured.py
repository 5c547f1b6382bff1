"""``shift=measured`` and :func:`actlab.calibrate_shifts_` against dense hand computations."""

from __future__ import annotations

import io
import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import actlab
from actlab.activations.spec import parse_spec, resolve_elementwise
from actlab.errors import ShiftNotCalibratedError, SpecError
from actlab.train.ensemble import Ensemble


def _mlp(
    first: str = "relu:shift=measured", second: str = "gelu:shift=measured", seed: int = 0
) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(3, 5),
        actlab.activation(first),
        nn.Linear(5, 4),
        actlab.activation(second),
        nn.Linear(4, 2),
    ).double()


def _batches(seed: int = 1) -> list[torch.Tensor]:
    """Two batches of different sizes, so an element-weighted mean differs from the mean of
    the batch means."""
    gen = torch.Generator().manual_seed(seed)
    return [
        torch.randn(7, 3, generator=gen, dtype=torch.float64) + 0.5,
        torch.randn(3, 3, generator=gen, dtype=torch.float64) - 1.0,
    ]


def _dense_reference(model: nn.Sequential, x: torch.Tensor) -> tuple[float, float, float]:
    """The two shifts measured by hand, one layer after the other, and the second shift
    measured with the first layer still unshifted (what an all-at-once pass would give)."""
    w1, b1, w2, b2 = (
        t.detach() for t in (model[0].weight, model[0].bias, model[2].weight, model[2].bias)
    )
    h1 = torch.relu(x @ w1.T + b1)
    s1 = float(h1.sum() / h1.numel())
    s2 = float(F.gelu((h1 - s1) @ w2.T + b2).mean())
    s2_at_once = float(F.gelu(h1 @ w2.T + b2).mean())
    return s1, s2, s2_at_once


def test_spec_grammar_and_bad_specs() -> None:
    parsed = parse_spec("relu:shift=measured")
    assert parsed.options["shift"] == "measured" and parsed.canonical == "relu:shift=measured"
    for spec in (
        "gelu:shift=measured",
        "silu:beta=2:shift=measured",
        "sigmoid:clip=0.7:shift=measured",
    ):
        module = actlab.activation(spec)
        assert module.measured and module.needs_calibration and math.isnan(module.shift)
    with pytest.raises(SpecError, match=r"'theory' or 'measured'.*did you mean 'measured'"):
        actlab.activation("relu:shift=measurd")
    with pytest.raises(SpecError, match=r"'q' only applies with 'shift=theory'"):
        actlab.activation("relu:shift=measured:q=0.5")
    with pytest.raises(SpecError, match="measured on data"):
        actlab.theory.gaussian.resolve("relu:shift=measured")
    f, _ = resolve_elementwise("relu:shift=measured")  # the elementwise part only
    x = torch.linspace(-2, 2, 9, dtype=torch.float64)
    assert torch.equal(f(x), torch.relu(x))


def test_uncalibrated_module_raises_naming_the_fix() -> None:
    with pytest.raises(ShiftNotCalibratedError, match=r"calibrate_shifts_\(model, batches\)"):
        _mlp()(torch.zeros(2, 3, dtype=torch.float64))


def test_calibration_matches_dense_reference_layer_by_layer() -> None:
    model, batches = _mlp(), _batches()
    shifts = actlab.calibrate_shifts_(model, batches)
    s1, s2, s2_at_once = _dense_reference(model, torch.cat(batches))
    assert list(shifts) == ["1", "3"]
    assert shifts["1"] == pytest.approx(s1, rel=1e-12)
    assert shifts["3"] == pytest.approx(s2, rel=1e-12)
    # forward order matters: measured with layer 1 unshifted, layer 2's shift is another one
    # (by far more than the 1e-12 the comparison above allows)
    assert abs(s2 - s2_at_once) > 1e-6
    # element-weighted over batches, not the mean of the batch means
    first = [float(torch.relu(model[0](b)).detach().mean()) for b in batches]
    assert abs(s1 - sum(first) / 2) > 1e-6
    assert model[1].shift == shifts["1"] and not model[1].needs_calibration
    # the calibrated model is the hand-written one
    x = torch.cat(batches)
    h = torch.relu(model[0](x)) - s1
    expected = model[4](F.gelu(model[2](h)) - s2)
    assert torch.allclose(model(x), expected, rtol=0, atol=1e-12)
    # the shifted first layer has mean zero on the calibration data
    with torch.no_grad():
        assert abs(float((torch.relu(model[0](x)) - model[1].shift).mean())) < 1e-12


class _Reordered(nn.Module):
    """Registers its activations in the opposite order of the forward."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(2)
        self.late = actlab.activation("gelu:shift=measured")
        self.early = actlab.activation("relu:shift=measured")
        self.up = nn.Linear(3, 6).double()
        self.mid = nn.Linear(6, 6).double()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.late(self.mid(self.early(self.up(x))))


def test_calibration_follows_forward_order_not_registration_order() -> None:
    model, batches = _Reordered(), _batches()
    shifts = actlab.calibrate_shifts_(model, batches)
    assert list(shifts) == ["early", "late"]
    x = torch.cat(batches)
    with torch.no_grad():
        h = torch.relu(model.up(x))
        s1 = float(h.mean())
        s2 = float(F.gelu(model.mid(h - s1)).mean())
    assert (shifts["early"], shifts["late"]) == pytest.approx((s1, s2), rel=1e-12)


def test_mode_kept_no_grad_no_other_state_changed() -> None:
    torch.manual_seed(3)
    model = nn.Sequential(
        nn.Linear(3, 8),
        nn.BatchNorm1d(8),
        actlab.activation("noisy_relu:shift=measured"),
        nn.Linear(8, 2),
        actlab.activation("relu:adaptive:momentum=0.5:shift=measured"),
    ).double()
    grad_modes: list[bool] = []
    model[0].register_forward_hook(lambda *_: grad_modes.append(torch.is_grad_enabled()))
    for training in (True, False):
        model.train(training)
        before = {k: v.clone() for k, v in model.state_dict().items() if "offset" not in k}
        rng = torch.get_rng_state()
        actlab.calibrate_shifts_(model, _batches())
        assert all(m.training == training for m in model.modules())
        assert grad_modes and not any(grad_modes)
        assert all(p.grad is None for p in model.parameters())
        assert all(not m.needs_calibration for m in (model[2], model[4]))
        assert model[2].offset.grad_fn is None and not model[2].offset.requires_grad
        # running statistics, the adaptive state and the global generator are untouched
        after = model.state_dict()
        assert all(torch.equal(before[k], after[k]) for k in before)
        assert torch.equal(rng, torch.get_rng_state())
    # in training mode the noise of noisy_relu is part of the measured mean
    model.train()
    train_shift = actlab.calibrate_shifts_(model, _batches())["2"]
    model.eval()
    eval_shift = actlab.calibrate_shifts_(model, _batches())["2"]
    assert train_shift > eval_shift


def test_state_dict_round_trip_keeps_the_calibrated_shift() -> None:
    model = _mlp()
    actlab.calibrate_shifts_(model, _batches())
    state = model.state_dict()
    assert {"1.offset", "3.offset"} <= set(state)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    fresh = _mlp()
    assert fresh[1].needs_calibration
    fresh.load_state_dict(torch.load(buffer))
    assert not fresh[1].needs_calibration and fresh[3].shift == model[3].shift
    x = torch.cat(_batches(5))
    assert torch.equal(fresh(x), model(x))
    # an uncalibrated state makes the module uncalibrated again
    model.load_state_dict(_mlp().state_dict())
    assert model[1].needs_calibration
    # specs without shift=measured keep their shift out of state_dict
    assert "1.offset" not in _mlp("relu:shift=theory", "gelu").state_dict()


def test_recalibration_measures_afresh_and_bounds_follow() -> None:
    model, batches = _mlp(), _batches()
    first = actlab.calibrate_shifts_(model, batches)
    with torch.no_grad():
        model[0].bias.add_(1.0)
    second = actlab.calibrate_shifts_(model, batches)
    assert second["1"] == pytest.approx(_dense_reference(model, torch.cat(batches))[0])
    assert second["1"] > first["1"] + 0.5
    torch.manual_seed(0)
    sig = nn.Sequential(nn.Linear(3, 4), actlab.activation("sigmoid:shift=measured")).double()
    assert sig[1].bounds is None
    (shift,) = actlab.calibrate_shifts_(sig, batches).values()
    assert sig[1].bounds == pytest.approx((-shift, 1 - shift))


def test_bad_calls() -> None:
    with pytest.raises(ValueError, match="batches is empty"):
        actlab.calibrate_shifts_(_mlp(), [])
    assert actlab.calibrate_shifts_(_mlp("relu", "gelu"), _batches()) == {}
    unused = nn.ModuleDict(
        {
            "used": _mlp("relu:shift=measured", "gelu"),
            "spare": actlab.activation("relu:shift=measured"),
        }
    )

    class Partial(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.parts = unused

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.parts["used"](x)

    model = Partial()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        shifts = actlab.calibrate_shifts_(model, _batches())
    assert list(shifts) == ["parts.used.1"]
    assert any("parts.spare" in str(w.message) for w in caught)


def test_tuple_and_dict_batches() -> None:
    class TwoInputs(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(4)
            self.lin = nn.Linear(3, 4).double()
            self.act = actlab.activation("relu:shift=measured")

        def forward(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
            return self.act(self.lin(x) * scale)

    x = _batches()[0]
    by_tuple = actlab.calibrate_shifts_(TwoInputs(), [(x, 2.0)])
    by_dict = actlab.calibrate_shifts_(TwoInputs(), [{"x": x, "scale": 2.0}])
    expected = float(torch.relu(TwoInputs().lin(x) * 2.0).detach().mean())
    assert by_tuple["act"] == pytest.approx(expected) == by_dict["act"]


def test_ensemble_members_keep_their_own_calibrated_shifts() -> None:
    members = [_mlp(seed=s) for s in (0, 1)]
    for s, m in enumerate(members):
        actlab.calibrate_shifts_(m, _batches(10 + s))
    assert members[0][1].shift != members[1][1].shift
    ens = Ensemble({"measured": members})
    x = torch.cat(_batches(7))
    out = ens.call(torch.stack([x, x]))["measured"]
    for s, m in enumerate(members):
        assert torch.allclose(out[s], m(x), rtol=0, atol=1e-12)
        member = ens.member("measured", s)
        assert member[1].shift == m[1].shift and not member[1].needs_calibration
        assert torch.allclose(member(x), m(x), rtol=0, atol=1e-12)
    # uncalibrated members raise under vmap too
    with pytest.raises(ShiftNotCalibratedError):
        Ensemble({"raw": [_mlp(seed=0), _mlp(seed=1)]}).call(torch.stack([x, x]))
