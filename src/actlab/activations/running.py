"""Running statistics: the one meaning and range of ``momentum`` and ``freeze_after``.

Every actlab layer that keeps a running statistic reads these two options the same way:
the activation options ``adaptive`` (the running mean) and ``topk`` (the running Top-K
threshold), and the Percentile Centering norms (:mod:`actlab.nn.norms`).

* ``momentum=m``, m in (0, 1]: the weight of the newest batch statistic in the exponential
  moving average, ``running <- (1 - m) * running + m * batch`` (BatchNorm's convention). The
  EMA of "Bug or Feature²" §7 (Accumulation Stop), ``vbar_i = gamma vbar_{i-1} + (1 - gamma) v_i``,
  has ``gamma = 1 - m``.
* ``freeze_after=N``, a whole number N >= 1: the statistic is updated by the first N
  training forward calls and constant afterwards, in training and eval mode (Accumulation
  Stop). A frozen statistic has always been measured at least once, hence N >= 1.

Default momentum (ours, source ``actlab``): with ``freeze_after=N`` and no ``momentum``,
``m = min(1, HORIZONS / N)`` with ``HORIZONS = 5``. The EMA's horizon 1/m is then N/5 steps,
so the frozen value averages the last fifth of the warm-up and the value the EMA started
from keeps a weight ``(1 - m)^N <= e^-5 < 0.7%``. The paper's pair, gamma = 0.9999 with
T_warm = 50,000 ("Bug or Feature²" §7), is this rule: ``1 - 0.9999 = 5 / 50,000``. Without
``freeze_after`` each layer keeps its own default (0.1 for the norms, as BatchNorm).
"""

from __future__ import annotations

import math
from typing import Any

HORIZONS = 5.0  # ours: warm-up length / EMA horizon (see the module docstring)
MOMENTUM_RANGE = "in (0, 1]"
FREEZE_AFTER_RANGE = "a whole number >= 1"


def check_momentum(value: Any, label: str = "momentum") -> float:
    """``value`` as a momentum in (0, 1]; ``ValueError`` naming ``label`` otherwise."""
    try:
        m = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{label} must be a number {MOMENTUM_RANGE}, got {value!r}") from None
    if not (math.isfinite(m) and 0.0 < m <= 1.0):
        raise ValueError(f"{label} must be {MOMENTUM_RANGE}, got {value!r}")
    return m


def check_freeze_after(value: Any, label: str = "freeze_after") -> int:
    """``value`` as a step count >= 1; ``ValueError`` naming ``label`` otherwise.

    Strings must spell an integer (``"500"``); floats must be whole (``500.0``)."""
    if isinstance(value, bool):
        raise ValueError(f"{label} must be {FREEZE_AFTER_RANGE}, got {value!r}")
    try:
        count = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{label} must be {FREEZE_AFTER_RANGE} of steps, got {value!r}") from None
    if not isinstance(value, str) and float(value) != count:
        raise ValueError(f"{label} must be {FREEZE_AFTER_RANGE}, got {value!r}")
    if count < 1:
        raise ValueError(f"{label} must be {FREEZE_AFTER_RANGE}, got {value!r}")
    return count


def default_momentum(freeze_after: int) -> float:
    """Our default momentum for a warm-up of ``freeze_after`` steps: ``min(1, 5 / N)``."""
    return min(1.0, HORIZONS / check_freeze_after(freeze_after))


def resolve_momentum(
    momentum: float | None, freeze_after: int | None, fallback: float | None = None
) -> float | None:
    """The momentum a layer uses: ``momentum`` when given (checked), else
    :func:`default_momentum` of ``freeze_after`` when that is given, else ``fallback``."""
    if momentum is not None:
        return check_momentum(momentum)
    if freeze_after is not None:
        return default_momentum(freeze_after)
    return fallback
