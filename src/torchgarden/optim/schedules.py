"""Learning-rate schedules: pure functions of the global step.

The learning rate is derived state, never checkpointed: the trainer calls the schedule
with the global step and writes the result into the optimizer's param groups
(:func:`torchgarden.optim.set_learning_rate`). Every schedule here is plain Python
arithmetic on an ``int`` step, so evaluating it never touches a device.

The decay schedules follow Keras semantics; the warmup wrappers and the ``offset``
argument follow TensorFlow Model Garden (``official/modeling/optimization``).

Example:
    >>> schedule = LinearWarmup(CosineDecay(initial_learning_rate=0.1, decay_steps=100),
    ...                         warmup_steps=10, warmup_learning_rate=0.0)
    >>> round(schedule(5), 6), round(schedule(100), 6)
    (0.048776, 0.0)
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from typing import Any

__all__ = [
    "ConstantSchedule",
    "CosineDecay",
    "ExponentialDecay",
    "LearningRateSchedule",
    "LinearWarmup",
    "PiecewiseConstantDecay",
    "PolynomialDecay",
    "PolynomialWarmup",
    "PowerDecay",
]


def _check_positive(owner: str, name: str, value: float) -> None:
    if value <= 0:
        raise ValueError(f"{owner}: `{name}` must be > 0, got {value!r}.")


class LearningRateSchedule:
    """Base class: maps a global step (``int``) to a learning rate (``float``).

    Subclasses implement :meth:`__call__` and :meth:`get_config`. A schedule must be a
    pure function of the step, so a resumed run reproduces the same rates.
    """

    def __call__(self, step: int) -> float:
        """Returns the learning rate at ``step`` (the number of optimizer steps taken)."""
        raise NotImplementedError(f"{type(self).__name__} must implement __call__(step).")

    def get_config(self) -> dict[str, Any]:
        """Returns the constructor arguments as plain data (for logs and params files).

        A wrapped schedule is nested as ``{"class_name": ..., "config": ...}``.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement get_config().")

    @property
    def is_constant(self) -> bool:
        """True when the rate never changes, so a trainer may skip per-step LR writes."""
        return False

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"


class _OffsetSchedule(LearningRateSchedule):
    """A schedule whose value at step ``s`` is the base value at ``s - offset``, as in Model
    Garden's offset wrappers: before the offset Keras' formula runs on a negative step (a
    stepwise schedule then gives its first value, an exponential one more than that)."""

    def __init__(self, offset: int) -> None:
        self.offset = int(offset)

    def _shift(self, step: int) -> int:
        return step - self.offset


class ConstantSchedule(LearningRateSchedule):
    """A fixed learning rate (Model Garden's ``constant`` type).

    Args:
        learning_rate: The rate returned at every step. Defaults to 0.1.
    """

    def __init__(self, learning_rate: float = 0.1) -> None:
        self.learning_rate = float(learning_rate)

    def __call__(self, step: int) -> float:
        return self.learning_rate

    def get_config(self) -> dict[str, Any]:
        return {"learning_rate": self.learning_rate}

    @property
    def is_constant(self) -> bool:
        return True


class PiecewiseConstantDecay(_OffsetSchedule):
    """Piecewise-constant rates (Model Garden's ``stepwise`` type, Keras semantics).

    The rate is ``values[0]`` for ``step <= boundaries[0]``, ``values[i]`` for
    ``boundaries[i-1] < step <= boundaries[i]`` and ``values[-1]`` after the last boundary.

    Args:
        boundaries: Strictly increasing step boundaries.
        values: Rates; exactly ``len(boundaries) + 1`` entries.
        offset: Steps to shift the schedule by. Defaults to 0.

    Raises:
        ValueError: If the lengths do not match or the boundaries are not increasing.
    """

    def __init__(self, boundaries: Sequence[int], values: Sequence[float], offset: int = 0) -> None:
        super().__init__(offset)
        boundaries = list(boundaries or [])
        values = list(values or [])
        if len(values) != len(boundaries) + 1:
            raise ValueError(
                f"PiecewiseConstantDecay: `values` must have len(boundaries) + 1 = "
                f"{len(boundaries) + 1} entries for boundaries={boundaries}, got "
                f"{len(values)} ({values})."
            )
        for before, after in zip(boundaries, boundaries[1:]):
            if after <= before:
                raise ValueError(
                    f"PiecewiseConstantDecay: `boundaries` must be strictly increasing, got "
                    f"{boundaries} ({after} follows {before})."
                )
        self.boundaries = boundaries
        self.values = [float(v) for v in values]

    def __call__(self, step: int) -> float:
        # bisect_left counts the boundaries strictly below the step.
        return self.values[bisect.bisect_left(self.boundaries, self._shift(step))]

    def get_config(self) -> dict[str, Any]:
        return {"boundaries": self.boundaries, "values": self.values, "offset": self.offset}


class ExponentialDecay(_OffsetSchedule):
    """``initial_learning_rate * decay_rate ** (step / decay_steps)`` (Keras semantics).

    Args:
        initial_learning_rate: The rate at step 0.
        decay_steps: Steps per factor of ``decay_rate``; must be > 0.
        decay_rate: The multiplicative decay per ``decay_steps``.
        staircase: If True, the exponent is floored, so the rate drops in steps.
            Defaults to False.
        offset: Steps to shift the schedule by. Defaults to 0.
    """

    def __init__(
        self,
        initial_learning_rate: float,
        decay_steps: int,
        decay_rate: float,
        staircase: bool = False,
        offset: int = 0,
    ) -> None:
        super().__init__(offset)
        _check_positive("ExponentialDecay", "decay_steps", decay_steps)
        self.initial_learning_rate = float(initial_learning_rate)
        self.decay_steps = decay_steps
        self.decay_rate = float(decay_rate)
        self.staircase = bool(staircase)

    def __call__(self, step: int) -> float:
        progress = self._shift(step) / self.decay_steps
        if self.staircase:
            progress = math.floor(progress)
        return self.initial_learning_rate * self.decay_rate**progress

    def get_config(self) -> dict[str, Any]:
        return {
            "initial_learning_rate": self.initial_learning_rate,
            "decay_steps": self.decay_steps,
            "decay_rate": self.decay_rate,
            "staircase": self.staircase,
            "offset": self.offset,
        }


class PolynomialDecay(_OffsetSchedule):
    """Polynomial decay from ``initial_learning_rate`` to ``end_learning_rate`` (Keras).

    ``(initial - end) * (1 - step / decay_steps) ** power + end``; without ``cycle`` the
    step is clamped at ``decay_steps``; with ``cycle`` the horizon grows to the next
    multiple of ``decay_steps`` above the step.

    Args:
        initial_learning_rate: The rate at step 0.
        decay_steps: Length of the decay; must be > 0.
        end_learning_rate: The final rate. Defaults to 1e-4 (Model Garden default).
        power: The polynomial power. Defaults to 1.0 (linear).
        cycle: Restart the decay after ``decay_steps``. Defaults to False.
        offset: Steps to shift the schedule by. Defaults to 0.
    """

    def __init__(
        self,
        initial_learning_rate: float,
        decay_steps: int,
        end_learning_rate: float = 1e-4,
        power: float = 1.0,
        cycle: bool = False,
        offset: int = 0,
    ) -> None:
        super().__init__(offset)
        _check_positive("PolynomialDecay", "decay_steps", decay_steps)
        self.initial_learning_rate = float(initial_learning_rate)
        self.decay_steps = decay_steps
        self.end_learning_rate = float(end_learning_rate)
        self.power = float(power)
        self.cycle = bool(cycle)

    def __call__(self, step: int) -> float:
        step = self._shift(step)
        horizon = self.decay_steps
        if self.cycle:
            horizon = self.decay_steps * max(1, math.ceil(step / self.decay_steps))
        else:
            step = min(step, horizon)
        remaining = 1.0 - step / horizon
        span = self.initial_learning_rate - self.end_learning_rate
        return span * remaining**self.power + self.end_learning_rate

    def get_config(self) -> dict[str, Any]:
        return {
            "initial_learning_rate": self.initial_learning_rate,
            "decay_steps": self.decay_steps,
            "end_learning_rate": self.end_learning_rate,
            "power": self.power,
            "cycle": self.cycle,
            "offset": self.offset,
        }


class CosineDecay(_OffsetSchedule):
    """Cosine decay to ``alpha * initial_learning_rate`` over ``decay_steps`` (Keras).

    ``initial * ((1 - alpha) * 0.5 * (1 + cos(pi * t / decay_steps)) + alpha)`` with
    ``t = min(step, decay_steps)``, so the rate stays at the floor after the decay.

    Args:
        initial_learning_rate: The rate at step 0.
        decay_steps: Length of the decay; must be > 0.
        alpha: The floor as a fraction of ``initial_learning_rate``. Defaults to 0.0.
        offset: Steps to shift the schedule by. Defaults to 0.
    """

    def __init__(
        self,
        initial_learning_rate: float,
        decay_steps: int,
        alpha: float = 0.0,
        offset: int = 0,
    ) -> None:
        super().__init__(offset)
        _check_positive("CosineDecay", "decay_steps", decay_steps)
        self.initial_learning_rate = float(initial_learning_rate)
        self.decay_steps = decay_steps
        self.alpha = float(alpha)

    def __call__(self, step: int) -> float:
        progress = min(self._shift(step), self.decay_steps) / self.decay_steps
        cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
        return self.initial_learning_rate * ((1.0 - self.alpha) * cosine + self.alpha)

    def get_config(self) -> dict[str, Any]:
        return {
            "initial_learning_rate": self.initial_learning_rate,
            "decay_steps": self.decay_steps,
            "alpha": self.alpha,
            "offset": self.offset,
        }


class PowerDecay(_OffsetSchedule):
    """``initial_learning_rate * max(step, 1) ** power`` (Model Garden's ``power`` type).

    Args:
        initial_learning_rate: The rate at steps 0 and 1.
        power: The exponent. Defaults to -0.5 (inverse square root).
        offset: Steps to shift the schedule by. Defaults to 0.
    """

    def __init__(self, initial_learning_rate: float, power: float = -0.5, offset: int = 0) -> None:
        super().__init__(offset)
        self.initial_learning_rate = float(initial_learning_rate)
        self.power = float(power)

    def __call__(self, step: int) -> float:
        return self.initial_learning_rate * max(self._shift(step), 1) ** self.power

    def get_config(self) -> dict[str, Any]:
        return {
            "initial_learning_rate": self.initial_learning_rate,
            "power": self.power,
            "offset": self.offset,
        }


def _serialize(schedule: LearningRateSchedule) -> dict[str, Any]:
    return {"class_name": type(schedule).__name__, "config": schedule.get_config()}


class LinearWarmup(LearningRateSchedule):
    """Linear warmup in front of another schedule (Model Garden's ``linear`` warmup).

    For ``step < warmup_steps`` the rate goes linearly from ``warmup_learning_rate`` to
    ``after(warmup_steps)``; from then on it is ``after(step)`` at the raw step (the warmup
    does not shift the wrapped schedule). ``warmup_steps <= 0`` disables the warmup.

    Args:
        after: The schedule used after (and targeted by) the warmup.
        warmup_steps: Length of the warmup in steps.
        warmup_learning_rate: The rate at step 0. Defaults to 0.0.
    """

    def __init__(
        self, after: LearningRateSchedule, warmup_steps: int, warmup_learning_rate: float = 0.0
    ) -> None:
        self.after = after
        self.warmup_steps = int(warmup_steps)
        self.warmup_learning_rate = float(warmup_learning_rate)
        # `after` is pure, so its value at the handoff is computed once.
        self._target = after(self.warmup_steps) if self.warmup_steps > 0 else 0.0

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            fraction = step / self.warmup_steps
            return self.warmup_learning_rate + fraction * (self._target - self.warmup_learning_rate)
        return self.after(step)

    def get_config(self) -> dict[str, Any]:
        return {
            "after": _serialize(self.after),
            "warmup_steps": self.warmup_steps,
            "warmup_learning_rate": self.warmup_learning_rate,
        }

    @property
    def is_constant(self) -> bool:
        return self.warmup_steps <= 0 and self.after.is_constant


class PolynomialWarmup(LearningRateSchedule):
    """Polynomial warmup in front of another schedule (Model Garden's ``polynomial`` warmup).

    For ``step < warmup_steps`` the rate is
    ``after(warmup_steps) * (max(step, 1) / warmup_steps) ** power``; from then on it is
    ``after(step)``. ``warmup_steps <= 0`` disables the warmup.

    Args:
        after: The schedule used after (and targeted by) the warmup.
        warmup_steps: Length of the warmup in steps.
        power: The warmup exponent. Defaults to 1.0.
    """

    def __init__(self, after: LearningRateSchedule, warmup_steps: int, power: float = 1.0) -> None:
        self.after = after
        self.warmup_steps = int(warmup_steps)
        self.power = float(power)
        self._target = after(self.warmup_steps) if self.warmup_steps > 0 else 0.0

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return self._target * (max(step, 1) / self.warmup_steps) ** self.power
        return self.after(step)

    def get_config(self) -> dict[str, Any]:
        return {
            "after": _serialize(self.after),
            "warmup_steps": self.warmup_steps,
            "power": self.power,
        }

    @property
    def is_constant(self) -> bool:
        return self.warmup_steps <= 0 and self.after.is_constant
