"""Closed forms behind the weight-drift theorems of "Bug or Feature²" (long version §2,
Theorems 2.1–2.3; App. A.1–A.3; the short version numbers them 1.1–1.3).

Setting. Pick a layer ``l`` of a bias-free ReLU network with pre-activations ``p`` (held
fixed) and ``h = relu(p)``. With the ReLU gates of the layers after ``l`` fixed by the input,
the output is linear in ``h``: ``f = V h`` with the *effective weight matrix*
``V = W_L D_G W_G ··· D_1 W_1`` (``C × n``, ``C`` outputs, ``n = len(p)``; ``W_k`` the
``G`` gated layers after ``l``, ``D_k`` their 0/1 gates, ``W_L`` the head). ``v_i`` is the
``i``-th column of ``V`` (unit ``i``'s route to the outputs). Every weight is drawn i.i.d.
from a sign-symmetric law with variance ``gain / fan_in``.

* Theorem 2.1: ``E[v_i] = 0`` and ``E⟨v_i, v_j⟩ = g δ_ij`` with
  ``g = C s_L² ∏_k (n_k s_k² / 2)`` (:func:`gram_scale`): flipping the sign of the last gated
  layer swaps its gates for their complement and keeps the products, so each gated layer
  contributes half of ``n_k s_k²``; the cross-correlations vanish exactly.
* Theorem 2.2 (MSE ``½‖f − y‖²``): ``E[∂ℓ/∂p_i] = g relu(p_i)`` (:func:`mse_expected_gradient`).
* Theorem 2.3 (cross-entropy, softmax linearised at ``f = 0``, whose Jacobian is
  ``(C I − 11ᵀ) / C² = P / C`` with ``P = I − 11ᵀ/C``): ``E[∂ℓ/∂p_i] = (C − 1)/C² · g relu(p_i)``
  (:func:`ce_factor`).
* App. A.3, one residual block ``z + relu(W z)`` after ``l`` on the stream
  ``z = a + relu(p)`` (``a`` the bypass): ``E⟨v_i, v_j⟩ = C s_L² [(1 + n s²/2) δ_ij +
  s (z_i + z_j) / (√(2π) ‖z‖)]`` (:func:`skip_gram`), since a ReLU gate that survives
  leans along its input (``E[1[w·z > 0] w] = s z / (√(2π)‖z‖)`` for ``w ~ N(0, s² I)``).
* The covariance term of App. A.1 at a layer whose input is ``relu`` of i.i.d. Gaussians:
  :func:`relu_input_covariance_ratio` (exact) ≈ ``3 / (2n)``.

docs/theory.md derives each of these.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

# A zero-mean law that is not sign-symmetric: -1 with probability 2/3, +2 with probability 1/3
# (variance 2). Theorem 2.1's non-negative cross-correlation fails for it.
SKEWED_VALUES = (-1.0, 2.0)
SKEWED_PROBS = (2.0 / 3.0, 1.0 / 3.0)


def _positive(name: str, value: float) -> None:
    if not value > 0:
        raise ValueError(f"{name} must be > 0, got {value}")


def gram_scale(width: int, hidden: Sequence[int], classes: int, gain: float = 2.0) -> float:
    """``g = E‖v_i‖²`` for ``width`` units at layer ``l``, gated layers of widths ``hidden``
    after it and a head of ``classes`` outputs, weights of variance ``gain / fan_in``.

    ``g = C s_L² ∏_k (n_k s_k² / 2)`` with ``s_k² = gain / n_{k-1}``; with He weights
    (``gain = 2``) the product telescopes to ``2C / width``.
    """
    widths = [int(width), *map(int, hidden)]
    for n in widths:
        _positive("every width", n)
    _positive("classes", classes)
    _positive("gain", gain)
    factor = math.prod(n_out * (gain / n_in) / 2.0 for n_in, n_out in zip(widths, widths[1:]))
    return classes * (gain / widths[-1]) * factor


def mse_expected_gradient(p: Sequence[float], g: float) -> np.ndarray:
    """``E[∂ℓ/∂p_i] = g relu(p_i)`` for ``ℓ = ½‖V relu(p) − y‖²`` (Theorem 2.2)."""
    return g * np.maximum(np.asarray(p, dtype=float), 0.0)


def ce_factor(classes: int) -> float:
    """``(C − 1) / C²``: the cross-entropy expectation over the MSE one (Theorem 2.3).

    The softmax Jacobian at the origin is ``(C I − 11ᵀ)/C²``: the overall coefficient
    ``1/C²`` times ``C P``, and ``E[v_iᵀ P v_i] = (C − 1)/C · E‖v_i‖²``.
    """
    _positive("classes", classes)
    return (classes - 1) / classes**2


def skip_gram(z: Sequence[float], classes: int, gain: float = 2.0) -> np.ndarray:
    """``E⟨v_i, v_j⟩`` (an ``n × n`` matrix) for one residual block ``z + relu(W z)`` followed by
    the head, on the stream ``z`` (App. A.3); ``W`` is ``n × n`` and the head ``C × n``, both
    Gaussian with variance ``gain / n``."""
    z = np.asarray(z, dtype=float)
    n = z.size
    norm = float(np.linalg.norm(z))
    _positive("the norm of z", norm)
    s = math.sqrt(gain / n)
    lean = s * (z[:, None] + z[None, :]) / (math.sqrt(2.0 * math.pi) * norm)
    return classes * (gain / n) * ((1.0 + n * s * s / 2.0) * np.eye(n) + lean)


def skip_expected_gradient(
    p: Sequence[float], bypass: Sequence[float], classes: int, gain: float = 2.0
) -> np.ndarray:
    """``E[∂ℓ/∂p_i] = 1[p_i > 0] Σ_j E⟨v_i, v_j⟩ z_j`` with ``z = bypass + relu(p)`` (MSE): the
    bypass enters with its own signs, so a unit whose stream ``z_i`` is negative enough gets a
    negative expected gradient although ``p_i > 0``."""
    p = np.asarray(p, dtype=float)
    z = np.asarray(bypass, dtype=float) + np.maximum(p, 0.0)
    return (p > 0) * (skip_gram(z, classes, gain) @ z)


def finite_gated_gram(
    h: Sequence[float],
    values: Sequence[float],
    probs: Sequence[float],
    hidden: int,
    head_variance: float,
    classes: int,
) -> np.ndarray:
    """Exact ``E⟨v_i, v_j⟩`` for one gated layer of ``hidden`` units whose weights are i.i.d.
    draws of a finite law (``values`` with ``probs``), followed by a zero-mean head of
    variance ``head_variance``: ``C σ_L² · hidden · E[1[w·h > 0] w wᵀ]``, enumerating every
    combination of a row ``w`` (``len(values) ** len(h)`` of them; small ``h`` only)."""
    h = np.asarray(h, dtype=float)
    values, probs = np.asarray(values, dtype=float), np.asarray(probs, dtype=float)
    if abs(probs.sum() - 1.0) > 1e-12:
        raise ValueError(f"probs must sum to 1, got {probs.sum()}")
    if h.size > 12:
        raise ValueError(f"enumeration needs a small layer, got {h.size} units")
    second = np.zeros((h.size, h.size))
    for idx in itertools.product(range(values.size), repeat=h.size):
        w = values[list(idx)]
        s = float(w @ h)
        if s == 0.0:
            raise ValueError("a row lands exactly on the gate's threshold; choose another h")
        if s > 0:
            second += float(np.prod(probs[list(idx)])) * np.outer(w, w)
    return classes * head_variance * hidden * second


def relu_input_covariance_ratio(n: int) -> float:
    """Exact ratio of the covariance term to the mean term of the mean weight gradient at a
    layer whose ``n`` inputs are ``relu`` of i.i.d. centred Gaussians (any scale), in
    expectation over that layer's Gaussian weights and the downstream weights (MSE).

    Both terms are proportional to ``E_w relu(w·x) = s‖x‖/√(2π)``, so the ratio is
    ``Cov(‖x‖, x_k) / (E‖x‖ E x_k)``. With ``K ~ Bin(n, ½)`` positive inputs, ``‖x‖`` is a
    ``χ_K`` and ``E[‖x‖ Σ_k x_k] = K² E|u_1|`` for ``u`` uniform on the sphere ``S^{K−1}``,
    which gives a finite sum; it is ``π − 1`` at ``n = 1``, ``1`` at ``n = 2`` and
    ``3/(2n) + O(1/n²)`` for wide layers.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    norm_mean, cross = 0.0, 0.0
    for k in range(1, n + 1):
        weight = math.exp(
            math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) - n * math.log(2.0)
        )
        half = math.lgamma((k + 1) / 2.0) - math.lgamma(k / 2.0)
        norm_mean += weight * math.sqrt(2.0) * math.exp(half)  # E χ_k
        cross += weight * k * k * math.exp(-half) / math.sqrt(math.pi)  # K² E|u_1|
    mean_input = 1.0 / math.sqrt(2.0 * math.pi)  # E relu(N(0, 1))
    return (cross / n) / (norm_mean * mean_input) - 1.0


def relu_input_covariance_ratio_wide(n: int) -> float:
    """The wide-layer limit ``3 / (2n)`` of :func:`relu_input_covariance_ratio`:
    ``Cov(x, x²) / (2 E[x²] E[x]) / n`` with ``E x = φ(0)``, ``E x² = 1/2``, ``E x³ = 2φ(0)``."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    return 1.5 / n
