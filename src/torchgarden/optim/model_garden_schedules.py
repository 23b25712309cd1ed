"""Model Garden's own learning-rate schedules (``lr_schedule.py``), beyond Keras' decays.

Each is a pure function of the global step, like every schedule in
:mod:`torchgarden.optim.schedules`, and follows the formula Model Garden computes:

* ``power_linear`` (:class:`PowerAndLinearDecay`): with ``t = step - offset``,
  ``lr * max(t, 1) ** power * clip((total - t) / (total * fraction), 0, 1)``.
* ``power_with_offset`` (:class:`PowerDecayWithOffset`): ``pre_offset_learning_rate``
  while ``step <= offset``, then ``min(lr * max(step - offset, 1) ** power,
  pre_offset_learning_rate)``.
* ``step_cosine_with_offset`` (:class:`StepCosineDecayWithOffset`): half-cosine
  segments between ``values`` at ``boundaries``.
* the legacy Keras optimizer ``decay`` argument (:class:`InverseTimeDecay`):
  ``schedule(step) / (1 + decay * step)``.

Example:
    >>> PowerAndLinearDecay(1.0, total_decay_steps=100, power=-1.0,
    ...                     linear_decay_fraction=0.5)(60)
    0.013333333333333334
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from typing import Any

from torchgarden.optim.schedules import LearningRateSchedule

__all__ = [
    "InverseTimeDecay",
    "PowerAndLinearDecay",
    "PowerDecayWithOffset",
    "StepCosineDecayWithOffset",
]


class PowerAndLinearDecay(LearningRateSchedule):
    """Power decay with a linear ramp to zero at the end (Model Garden's ``power_linear``).

    With ``t = step - offset``: ``initial_learning_rate * max(t, 1) ** power``, multiplied
    by ``min(1, (total_decay_steps - t) / (total_decay_steps * linear_decay_fraction))``
    and floored at 0 when ``total_decay_steps * linear_decay_fraction > 0``. Before the
    offset (``t <= 1``) the rate is ``initial_learning_rate``.

    Args:
        initial_learning_rate: The rate at ``t <= 1``.
        total_decay_steps: The step (after the offset) where the rate reaches 0.
        power: The exponent. Defaults to -0.5.
        linear_decay_fraction: The final fraction of ``total_decay_steps`` with the
            linear ramp. Defaults to 0.1.
        offset: Steps to shift the schedule by. Defaults to 0.
    """

    def __init__(self, initial_learning_rate: float, total_decay_steps: int,
                 power: float = -0.5, linear_decay_fraction: float = 0.1,
                 offset: int = 0) -> None:
        self.initial_learning_rate = float(initial_learning_rate)
        self.total_decay_steps = int(total_decay_steps)
        self.power = float(power)
        self.linear_decay_fraction = float(linear_decay_fraction)
        self.offset = int(offset)

    def __call__(self, step: int) -> float:
        t = step - self.offset
        rate = self.initial_learning_rate * max(t, 1) ** self.power
        ramp = self.total_decay_steps * self.linear_decay_fraction
        if ramp > 0:
            rate = max(0.0, rate * min(1.0, (self.total_decay_steps - t) / ramp))
        return rate

    def get_config(self) -> dict[str, Any]:
        return {
            "initial_learning_rate": self.initial_learning_rate,
            "total_decay_steps": self.total_decay_steps,
            "power": self.power,
            "linear_decay_fraction": self.linear_decay_fraction,
            "offset": self.offset,
        }


class PowerDecayWithOffset(LearningRateSchedule):
    """A constant rate, then power decay (Model Garden's ``power_with_offset``).

    ``pre_offset_learning_rate`` for ``step <= offset``; afterwards
    ``initial_learning_rate * max(step - offset, 1) ** power``, capped at
    ``pre_offset_learning_rate`` (a negative power can exceed it right after the offset).

    Args:
        initial_learning_rate: Multiplier of the power decay.
        power: The exponent. Defaults to -0.5.
        offset: The step where the decay starts. Defaults to 0.
        pre_offset_learning_rate: The rate up to ``offset`` and the cap. Defaults to 1e6.
    """

    def __init__(self, initial_learning_rate: float, power: float = -0.5, offset: int = 0,
                 pre_offset_learning_rate: float = 1.0e6) -> None:
        self.initial_learning_rate = float(initial_learning_rate)
        self.power = float(power)
        self.offset = int(offset)
        self.pre_offset_learning_rate = float(pre_offset_learning_rate)

    def __call__(self, step: int) -> float:
        if step <= self.offset:
            return self.pre_offset_learning_rate
        decayed = self.initial_learning_rate * max(step - self.offset, 1) ** self.power
        return min(decayed, self.pre_offset_learning_rate)

    def get_config(self) -> dict[str, Any]:
        return {
            "initial_learning_rate": self.initial_learning_rate,
            "power": self.power,
            "offset": self.offset,
            "pre_offset_learning_rate": self.pre_offset_learning_rate,
        }


class StepCosineDecayWithOffset(LearningRateSchedule):
    """Piecewise cosine decay (Model Garden's ``step_cosine_with_offset``).

    With ``t = step - offset``, segment ``i`` covers ``boundaries[i] <= t <
    boundaries[i + 1]`` and follows a half cosine from ``values[i]`` down (or up) to
    ``values[i + 1]`` over ``boundaries[i + 1] - boundaries[i]``
    steps: ``(v_i - v_next) * (1 + cos(pi * (t - b_i) / length)) / 2 + v_next``. As in
    Model Garden, the first segment counts ``t`` from 0 (not from ``boundaries[0]``),
    and applies before ``boundaries[0]`` too.

    From the last boundary on, Model Garden divides by a zero segment length (NaN); this
    schedule holds ``values[-1]`` there instead. Make the last boundary the end of
    training to port a run exactly.

    Args:
        boundaries: Strictly increasing segment starts (usually ``[0, ...]``).
        values: The rate at each segment's start; as many as ``boundaries``.
        offset: Steps to shift the schedule by. Defaults to 0.

    Raises:
        ValueError: If ``values`` is empty, the lengths differ or the boundaries do not
            increase.
    """

    def __init__(self, boundaries: Sequence[int], values: Sequence[float],
                 offset: int = 0) -> None:
        boundaries, values = list(boundaries or []), [float(v) for v in values or []]
        if not values or len(values) != len(boundaries):
            raise ValueError(
                "StepCosineDecayWithOffset: `boundaries` and `values` must be non-empty and "
                f"of equal length, got boundaries={boundaries} and values={values}.")
        if any(b >= a for b, a in zip(boundaries, boundaries[1:])):
            raise ValueError(f"StepCosineDecayWithOffset: `boundaries` must be strictly "
                             f"increasing, got {boundaries}.")
        self.boundaries, self.values, self.offset = boundaries, values, int(offset)

    def __call__(self, step: int) -> float:
        t = step - self.offset
        index = max(bisect.bisect_right(self.boundaries, t) - 1, 0)
        if index == len(self.boundaries) - 1:
            return self.values[-1]
        start = self.boundaries[index] if index > 0 else 0
        length = self.boundaries[index + 1] - self.boundaries[index]
        high = self.values[index]
        low = self.values[index + 1]
        return (high - low) * (1.0 + math.cos(math.pi * (t - start) / length)) / 2.0 + low

    def get_config(self) -> dict[str, Any]:
        return {"boundaries": self.boundaries, "values": self.values, "offset": self.offset}


class InverseTimeDecay(LearningRateSchedule):
    """``after(step) / (1 + decay * step)``: the legacy Keras optimizers' ``decay``.

    Model Garden's ``sgd`` config has ``decay`` (Keras' legacy SGD argument), applied to
    the scheduled rate at every iteration; this wraps the schedule with it.

    Args:
        after: The schedule whose rate is decayed.
        decay: The inverse-time decay per step; must be >= 0.
    """

    def __init__(self, after: LearningRateSchedule, decay: float) -> None:
        if decay < 0:
            raise ValueError(f"InverseTimeDecay: `decay` must be >= 0, got {decay!r}.")
        self.after, self.decay = after, float(decay)

    def __call__(self, step: int) -> float:
        return self.after(step) / (1.0 + self.decay * step)

    def get_config(self) -> dict[str, Any]:
        after = {"class_name": type(self.after).__name__, "config": self.after.get_config()}
        return {"after": after, "decay": self.decay}
