"""Monte Carlo estimators of the quantities the drift theorems speak of, each with its
standard error (see :mod:`actlab.theory.drift` for the closed forms they are checked against).

Every study holds the state at layer ``l`` fixed (pre-activations ``p``, a target ``y``, a
bypass) and draws the downstream weights afresh ``samples`` times, in chunks of ``chunk``
networks evaluated at once (batched matrix products). Weights are drawn on the CPU from the
caller's generator and moved to the unit's device, so a run gives the same numbers on every
device. Gradients with respect to ``p`` come from autograd; the effective weight matrix
``V`` is built separately from the gates, so the two checks do not share code.

The cross-entropy estimates use antithetic pairs ``(W_L, −W_L)``: flipping the head flips
``V`` and ``f`` exactly and leaves the gates alone, so for a sign-symmetric head the pair's
mean is an unbiased draw whose label term cancels. :func:`covariance_study` draws whole
networks and a batch of inputs per network instead.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from actlab.device import to_unit_device, unit_device
from actlab.theory.drift import SKEWED_PROBS, SKEWED_VALUES

LAWS = ("gaussian", "rademacher", "skewed")
DTYPE = torch.float64


def draw(
    shape: Sequence[int], fan_in: int, gain: float, law: str, generator: torch.Generator
) -> Tensor:
    """I.i.d. weights of variance ``gain / fan_in`` from ``law`` (drawn on the CPU, then moved
    to the unit's device): ``gaussian``, ``rademacher`` (±1) or ``skewed`` (the zero-mean
    two-point law of :data:`~actlab.theory.drift.SKEWED_VALUES`)."""
    scale = math.sqrt(gain / fan_in)
    if law == "gaussian":
        w = torch.randn(*shape, dtype=DTYPE, generator=generator)
    elif law == "rademacher":
        w = torch.randint(0, 2, tuple(shape), generator=generator).to(dtype=DTYPE) * 2.0 - 1.0
    elif law == "skewed":
        low, high = SKEWED_VALUES
        u = torch.rand(*shape, dtype=DTYPE, generator=generator)
        w = torch.where(u < SKEWED_PROBS[0], low, high).to(dtype=DTYPE)
        scale /= math.sqrt(SKEWED_PROBS[0] * low**2 + SKEWED_PROBS[1] * high**2)
    else:
        raise ValueError(f"unknown law {law!r}; use one of {', '.join(LAWS)}")
    return to_unit_device(w * scale)


def chunks(samples: int, chunk: int) -> Iterator[int]:
    """Sizes of the chunks that make up ``samples`` draws."""
    done = 0
    while done < samples:
        size = min(chunk, samples - done)
        yield size
        done += size


class Moments:
    """Mean and standard error of a per-draw tensor, from running sums (shifted by the first
    chunk's mean, so that the sum of squares does not cancel)."""

    def __init__(self) -> None:
        self.count = 0
        self.shift: Tensor | None = None
        self.total: Tensor | None = None
        self.squares: Tensor | None = None

    def add(self, draws: Tensor) -> None:
        """Add a chunk of draws (first dimension: the draws)."""
        draws = draws.detach()
        if self.shift is None:
            self.shift = draws.mean(0)
            self.total = torch.zeros_like(self.shift)
            self.squares = torch.zeros_like(self.shift)
        centred = draws - self.shift
        self.total = self.total + centred.sum(0)
        self.squares = self.squares + (centred * centred).sum(0)
        self.count += draws.shape[0]

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        """``(mean, standard error)`` as arrays of the draws' shape."""
        if self.count < 2 or self.total is None:
            raise ValueError("need at least two draws")
        total, squares, shift = (t.cpu().numpy() for t in (self.total, self.squares, self.shift))
        mean = total / self.count
        var = np.maximum(squares - self.count * mean * mean, 0.0) / (self.count - 1)
        return shift + mean, np.sqrt(var / self.count)


def mean_se(draws: np.ndarray) -> tuple[float, float]:
    """Mean and standard error of one-dimensional ``draws``."""
    draws = np.asarray(draws, dtype=float)
    return float(draws.mean()), float(draws.std(ddof=1) / math.sqrt(draws.size))


def ratio_se(num: np.ndarray, den: np.ndarray) -> tuple[float, float]:
    """``mean(num) / mean(den)`` over paired draws and its delta-method standard error."""
    num, den = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = float(num.mean() / den.mean())
        se = float((num - ratio * den).std(ddof=1) / (math.sqrt(num.size) * abs(den.mean())))
    return ratio, se


def exponent_se(small: np.ndarray, large: np.ndarray) -> tuple[float, float]:
    """``log2(mean(large) / mean(small))`` over paired draws (``large`` at twice the scale of
    ``small``) and its delta-method standard error: the order of the quantity in the scale."""
    small, large = np.asarray(small, dtype=float), np.asarray(large, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        value = float(np.log2(large.mean() / small.mean()))
        spread = (large / large.mean() - small / small.mean()).std(ddof=1)
        se = float(spread / (math.sqrt(small.size) * math.log(2.0)))
    return value, se


@dataclass
class PlainResult:
    """What :func:`plain_study` estimated (means ``*_mean`` with standard errors ``*_se``).

    ``v`` is ``V`` (``C × n``), ``gram`` ``⟨v_i, v_j⟩`` (``n × n``), ``mse`` the autograd
    gradient of ``½‖f − y‖²`` per unit, ``ce`` the cross-entropy gradient at output scale
    ``eps`` divided by ``eps²`` (antithetic pairs). ``draws`` holds per-draw sums over the
    units: ``trace`` (``mean_i ‖v_i‖²``), ``mse`` (the gradient), ``b`` (its label-free part
    ``v_iᵀ f``), ``a1``/``a2``
    (cross-entropy at ``eps``/``2 eps``, each over its scale squared), ``c1``/``c2`` (the
    cross-entropy gradient minus its linearisation at ``eps``/``2 eps``) and ``even`` (the
    part of the cross-entropy gradient even in ``f``, over ``eps³``, one plain draw).
    """

    v_mean: np.ndarray
    v_se: np.ndarray
    gram_mean: np.ndarray
    gram_se: np.ndarray
    mse_mean: np.ndarray
    mse_se: np.ndarray
    ce_mean: np.ndarray
    ce_se: np.ndarray
    draws: dict[str, np.ndarray] = field(default_factory=dict)


def _rowvec(x: Tensor, v: Tensor) -> Tensor:
    """``xᵀ V`` per draw: ``x`` is ``(m, C)``, ``v`` is ``(m, C, n)``; the result ``(m, n)``."""
    return (x.unsqueeze(1) @ v).squeeze(1)


def plain_study(
    p: Tensor,
    y: Tensor,
    hidden: Sequence[int],
    classes: int,
    *,
    gain: float,
    samples: int,
    chunk: int,
    eps: float,
    generator: torch.Generator,
    law: str = "gaussian",
) -> PlainResult:
    """Theorems 2.1–2.3 on a plain ReLU stack after layer ``l``: gated layers ``hidden``, a
    ``classes``-way head, all weights from ``law`` with variance ``gain / fan_in``."""
    device = unit_device()
    p, y = to_unit_device(p.to(dtype=DTYPE), y.to(dtype=DTYPE))
    n = p.numel()
    widths = (n, *hidden)
    gate = (p > 0).to(dtype=DTYPE)
    eye = torch.eye(n, dtype=DTYPE, device=device)
    stats = {name: Moments() for name in ("v", "gram", "mse", "ce")}
    draws: dict[str, list[Tensor]] = {
        k: [] for k in ("trace", "mse", "b", "a1", "a2", "c1", "c2", "even")
    }
    for m in chunks(samples, chunk):
        weights = [
            draw((m, n_out, n_in), n_in, gain, law, generator)
            for n_in, n_out in zip(widths, widths[1:])
        ]
        head = draw((m, classes, widths[-1]), widths[-1], gain, law, generator)
        pre = p.expand(m, n).clone().requires_grad_(True)
        z = pre.clamp_min(0).unsqueeze(-1)
        route = eye.expand(m, n, n)
        for w in weights:
            net = w @ z
            open_ = (net > 0).to(dtype=DTYPE)
            z = net.clamp_min(0)
            route = open_ * (w @ route)  # D_k W_k ··· D_1 W_1, gates fixed
        f = (head @ z).squeeze(-1)
        v = head @ route  # the effective weight matrix, (m, C, n)
        (grad,) = torch.autograd.grad(0.5 * (f - y).pow(2).sum(), pre)
        with torch.no_grad():
            f = f.detach()
            centred = f - f.mean(-1, keepdim=True)  # P f
            parts = {}
            for name, e in (("1", eps), ("2", 2.0 * eps)):
                up, down = torch.softmax(e * f, -1), torch.softmax(-e * f, -1)
                odd = 0.5 * e * _rowvec(up - down, v) * gate
                linear = (e * e / classes) * _rowvec(centred, v) * gate
                parts[name] = (odd, odd - linear, up, down)
            odd1, corr1, up1, down1 = parts["1"]
            even = 0.5 * eps * _rowvec(up1 + down1 - 2.0 / classes, v) * gate
            stats["v"].add(v)
            stats["gram"].add(v.transpose(1, 2) @ v)
            stats["mse"].add(grad)
            draws["trace"].append(v.pow(2).sum(1).mean(1))
            stats["ce"].add(odd1 / eps**2)
            draws["mse"].append(grad.sum(1))
            draws["b"].append((_rowvec(f, v) * gate).sum(1))
            draws["a1"].append(odd1.sum(1) / eps**2)
            draws["a2"].append(parts["2"][0].sum(1) / (2.0 * eps) ** 2)
            draws["c1"].append(corr1.sum(1))
            draws["c2"].append(parts["2"][1].sum(1))
            draws["even"].append(even.sum(1) / eps**3)
    (v_mean, v_se), (g_mean, g_se), (m_mean, m_se), (c_mean, c_se) = (
        stats[k].result() for k in ("v", "gram", "mse", "ce")
    )
    return PlainResult(
        v_mean,
        v_se,
        g_mean,
        g_se,
        m_mean,
        m_se,
        c_mean,
        c_se,
        {k: torch.cat(d).cpu().numpy() for k, d in draws.items()},
    )


@dataclass
class SkipResult:
    """What :func:`skip_study` estimated: ``gram`` ``⟨v_i, v_j⟩`` (``n × n``), ``mse`` the
    autograd gradient per unit, and per-draw sums over the units of the gradient
    (``draws["mse"]``) and of the off-diagonal Gram entries (``draws["cross"]``)."""

    gram_mean: np.ndarray
    gram_se: np.ndarray
    mse_mean: np.ndarray
    mse_se: np.ndarray
    draws: dict[str, np.ndarray] = field(default_factory=dict)


def skip_study(
    p: Tensor,
    bypass: Tensor,
    y: Tensor,
    classes: int,
    *,
    gain: float,
    samples: int,
    chunk: int,
    generator: torch.Generator,
) -> SkipResult:
    """App. A.3: the stream ``z = bypass + relu(p)`` passes one residual block
    ``z + relu(W z)`` and the head; Gaussian weights of variance ``gain / n``."""
    device = unit_device()
    p, bypass, y = to_unit_device(p.to(dtype=DTYPE), bypass.to(dtype=DTYPE), y.to(dtype=DTYPE))
    n = p.numel()
    eye = torch.eye(n, dtype=DTYPE, device=device)
    off = 1.0 - eye
    gram, mse = Moments(), Moments()
    draws: dict[str, list[Tensor]] = {"mse": [], "cross": []}
    for m in chunks(samples, chunk):
        w = draw((m, n, n), n, gain, "gaussian", generator)
        head = draw((m, classes, n), n, gain, "gaussian", generator)
        pre = p.expand(m, n).clone().requires_grad_(True)
        z = (bypass + pre.clamp_min(0)).unsqueeze(-1)
        net = w @ z
        out = z + net.clamp_min(0)
        f = (head @ out).squeeze(-1)
        (grad,) = torch.autograd.grad(0.5 * (f - y).pow(2).sum(), pre)
        with torch.no_grad():
            v = head @ (eye + (net > 0).to(dtype=DTYPE) * w)  # W_L (I + D W)
            g = v.transpose(1, 2) @ v
            gram.add(g)
            mse.add(grad)
            draws["mse"].append(grad.sum(1))
            draws["cross"].append((g * off).sum((1, 2)))
    (g_mean, g_se), (m_mean, m_se) = gram.result(), mse.result()
    return SkipResult(
        g_mean, g_se, m_mean, m_se, {k: torch.cat(d).cpu().numpy() for k, d in draws.items()}
    )


def gram_study(
    h: Tensor,
    hidden: int,
    classes: int,
    *,
    gain: float,
    samples: int,
    chunk: int,
    generator: torch.Generator,
    law: str = "skewed",
) -> tuple[np.ndarray, np.ndarray]:
    """``E⟨v_i, v_j⟩`` (mean and standard error, ``n × n``) for one gated layer of ``hidden``
    units with weights from ``law`` after the fixed activations ``h``, and a Gaussian head."""
    h = to_unit_device(h.to(dtype=DTYPE))
    n = h.numel()
    gram = Moments()
    for m in chunks(samples, chunk):
        w = draw((m, hidden, n), n, gain, law, generator)
        head = draw((m, classes, hidden), hidden, gain, "gaussian", generator)
        open_ = ((w @ h) > 0).to(dtype=DTYPE).unsqueeze(-1)
        v = head @ (open_ * w)
        gram.add(v.transpose(1, 2) @ v)
    return gram.result()


@dataclass
class CovarianceResult:
    """Per network (rows) and activation site (columns, site 1 = the first layer's
    pre-activations): ``weight_grad``, the mean over ``(i, k)`` of ``E_x[g_i x_k]`` (the mean
    weight gradient per example), and its split into ``mean_term``
    ``mean_i E[g_i] · mean_k E[x_k]`` and ``cov_term`` ``mean_ik Cov_x(g_i, x_k)``."""

    weight_grad: np.ndarray
    mean_term: np.ndarray
    cov_term: np.ndarray


def _loss(f: Tensor, target: Tensor, loss: str) -> Tensor:
    """Summed cross-entropy (``"ce"``, integer labels) or half squared error (``"mse"``)."""
    if loss == "ce":
        return torch.nn.functional.cross_entropy(f, target, reduction="sum")
    return 0.5 * (f - target).pow(2).sum()


def covariance_study(
    in_dim: int,
    width: int,
    blocks: int,
    classes: int,
    *,
    loss: str,
    first_layer: str,
    gain: float,
    networks: int,
    batch: int,
    generator: torch.Generator,
) -> CovarianceResult:
    """The covariance term of App. A.1 at initialisation: ``networks`` bias-free ReLU MLPs
    (input projection, ``blocks`` hidden layers, head) on ``batch`` standard normal inputs
    each, with random targets (``loss`` ``"mse"``: Gaussian; ``"ce"``: uniform labels).

    ``first_layer`` ``"orthogonal"`` gives the input projection orthonormal rows times
    ``√gain``, so the second layer's inputs are exactly ``relu`` of i.i.d. ``N(0, gain)``;
    ``"gaussian"`` draws it like the others (variance ``gain / fan_in``).
    """
    if first_layer == "orthogonal" and width > in_dim:
        raise ValueError(
            f"an orthogonal input projection needs width <= in_dim, got {width} > {in_dim}"
        )
    dims = [in_dim] + [width] * (blocks + 1)
    rows: dict[str, list[list[float]]] = {"weight_grad": [], "mean_term": [], "cov_term": []}
    for _ in range(networks):
        weights = []
        for index, (n_in, n_out) in enumerate(zip(dims, dims[1:])):
            if index == 0 and first_layer == "orthogonal":
                q, _ = torch.linalg.qr(torch.randn(n_in, n_out, dtype=DTYPE, generator=generator))
                weights.append(to_unit_device(q.T.contiguous() * math.sqrt(gain)))
            else:
                weights.append(draw((n_out, n_in), n_in, gain, "gaussian", generator))
        head = draw((classes, width), width, gain, "gaussian", generator)
        x = to_unit_device(torch.randn(batch, in_dim, dtype=DTYPE, generator=generator))
        if loss == "ce":
            target = to_unit_device(torch.randint(0, classes, (batch,), generator=generator))
        else:
            target = to_unit_device(torch.randn(batch, classes, dtype=DTYPE, generator=generator))
        inputs, pres, a = [], [], x
        for w in weights:
            inputs.append(a)
            pre = (a @ w.T).requires_grad_(True)
            pres.append(pre)
            a = pre.clamp_min(0)
        f = a @ head.T
        # the mean of the pair (W_L, -W_L): one backward pass, the label term cancels
        value = 0.5 * (_loss(f, target, loss) + _loss(-f, target, loss))
        grads = torch.autograd.grad(value, pres)
        per = {k: [] for k in rows}
        with torch.no_grad():
            for g, inp in zip(grads, inputs):
                g_bar, x_bar = g.mean(1), inp.mean(1)  # mean over i, mean over k, per example
                product = (g_bar * x_bar).mean()
                cov = ((g_bar - g_bar.mean()) * (x_bar - x_bar.mean())).sum() / (batch - 1)
                per["weight_grad"].append(product)
                per["cov_term"].append(cov)
                per["mean_term"].append(product - cov)
        for k, values in per.items():
            rows[k].append(torch.stack(values).tolist())
    return CovarianceResult(
        *(np.asarray(rows[k], dtype=float) for k in ("weight_grad", "mean_term", "cov_term"))
    )
