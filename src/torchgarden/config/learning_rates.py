"""Learning-rate and warmup configs, one per ``learning_rate.type`` / ``warmup.type``.

Field names and defaults are Model Garden's (``learning_rate_config.py``).
"""

from __future__ import annotations

import dataclasses

from torchgarden.config.base import Config

__all__ = [
    "ConstantLrConfig",
    "CosineLrConfig",
    "ExponentialLrConfig",
    "LinearWarmupConfig",
    "PolynomialLrConfig",
    "PolynomialWarmupConfig",
    "PowerAndLinearDecayLrConfig",
    "PowerDecayWithOffsetLrConfig",
    "PowerLrConfig",
    "ScheduleConfig",
    "StepCosineLrConfig",
    "StepwiseLrConfig",
]

_field = dataclasses.field


@dataclasses.dataclass
class ScheduleConfig(Config):
    """Fields shared by every schedule and warmup config."""

    name: str | None = None
    """Model Garden's display name of the schedule; accepted so pasted configs read, unused."""


@dataclasses.dataclass
class ConstantLrConfig(ScheduleConfig):
    """A fixed learning rate."""

    learning_rate: float = 0.1
    """The learning rate."""


@dataclasses.dataclass
class StepwiseLrConfig(ScheduleConfig):
    """Piecewise-constant rate: `values[i]` until step `boundaries[i]`, then the next."""

    boundaries: list[int] = _field(default_factory=list)
    """Steps where the rate changes, increasing."""
    values: list[float] = _field(default_factory=list)
    """Rates, one more than `boundaries`."""
    offset: int = 0
    """Steps subtracted from the global step before the schedule."""


@dataclasses.dataclass
class ExponentialLrConfig(ScheduleConfig):
    """`initial_learning_rate * decay_rate ** (step / decay_steps)`."""

    initial_learning_rate: float = 0.1
    """Rate at step 0."""
    decay_steps: int = 1
    """Steps per decay period."""
    decay_rate: float = 0.96
    """Factor applied per period."""
    staircase: bool = False
    """Decay in whole periods (integer division)."""
    offset: int = 0
    """Steps subtracted from the global step before the schedule."""


@dataclasses.dataclass
class PolynomialLrConfig(ScheduleConfig):
    """Polynomial decay from `initial_learning_rate` to `end_learning_rate`."""

    initial_learning_rate: float = 0.1
    """Rate at step 0."""
    decay_steps: int = 1
    """Steps over which the rate decays."""
    end_learning_rate: float = 1e-4
    """Rate after `decay_steps`."""
    power: float = 1.0
    """Exponent of the polynomial (1.0 is linear)."""
    cycle: bool = False
    """Restart the decay every `decay_steps` (with a growing period)."""
    offset: int = 0
    """Steps subtracted from the global step before the schedule."""


@dataclasses.dataclass
class CosineLrConfig(ScheduleConfig):
    """Cosine decay from `initial_learning_rate` to `alpha * initial_learning_rate`."""

    initial_learning_rate: float = 0.1
    """Rate at step 0."""
    decay_steps: int = 1
    """Steps over which the rate decays."""
    alpha: float = 0.0
    """Final rate as a fraction of the initial one."""
    offset: int = 0
    """Steps subtracted from the global step before the schedule."""


@dataclasses.dataclass
class PowerLrConfig(ScheduleConfig):
    """`initial_learning_rate * max(step, 1) ** power`."""

    initial_learning_rate: float = 0.1
    """Rate at step 1."""
    power: float = -0.5
    """Exponent applied to the step."""
    offset: int = 0
    """Steps subtracted from the global step before the schedule."""


@dataclasses.dataclass
class PowerAndLinearDecayLrConfig(ScheduleConfig):
    """``power_linear``: ``lr * max(t, 1) ** power``, times a linear ramp to zero over the
    last ``linear_decay_fraction`` of ``total_decay_steps`` (``t = step - offset``)."""

    initial_learning_rate: float = 0.1
    """Rate at steps 0 and 1."""
    total_decay_steps: int = 1
    """Step (after the offset) at which the rate reaches zero."""
    power: float = -0.5
    """Exponent applied to the step."""
    linear_decay_fraction: float = 0.1
    """Fraction of ``total_decay_steps`` over which the linear ramp runs."""
    offset: int = 0
    """Steps subtracted from the global step before the schedule."""


@dataclasses.dataclass
class PowerDecayWithOffsetLrConfig(ScheduleConfig):
    """``power_with_offset``: ``pre_offset_learning_rate`` up to step ``offset``, then
    ``lr * max(step - offset, 1) ** power``, capped at ``pre_offset_learning_rate``."""

    initial_learning_rate: float = 0.1
    """Multiplier of the power decay."""
    power: float = -0.5
    """Exponent applied to the step."""
    offset: int = 0
    """Step where the power decay starts."""
    pre_offset_learning_rate: float = 1.0e6
    """Rate up to ``offset``, and the cap afterwards."""


@dataclasses.dataclass
class StepCosineLrConfig(ScheduleConfig):
    """``step_cosine_with_offset``: segment ``i`` (from ``boundaries[i]``) decays along a
    cosine from ``values[i]`` to ``values[i + 1]`` over ``boundaries[i + 1] - boundaries[i]``
    steps."""

    boundaries: list[int] = _field(default_factory=list)
    """Segment starts, strictly increasing (usually from 0)."""
    values: list[float] = _field(default_factory=list)
    """Rate at the start of each segment; as many as ``boundaries``."""
    offset: int = 0
    """Steps subtracted from the global step before the schedule."""


@dataclasses.dataclass
class LinearWarmupConfig(ScheduleConfig):
    """Linear ramp from `warmup_learning_rate` to the schedule's rate at `warmup_steps`."""

    warmup_learning_rate: float = 0.0
    """Rate at step 0."""
    warmup_steps: int = 0
    """Length of the ramp; 0 disables warmup."""


@dataclasses.dataclass
class PolynomialWarmupConfig(ScheduleConfig):
    """Rate at `warmup_steps` times `(max(step, 1) / warmup_steps) ** power`."""

    power: float = 1.0
    """Exponent of the ramp."""
    warmup_steps: int = 0
    """Length of the ramp; 0 or less disables warmup."""
