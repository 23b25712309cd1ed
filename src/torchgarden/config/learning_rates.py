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
    """Model Garden's display name of the schedule; accepted so pasted configs read,
    unused. Defaults to None."""


@dataclasses.dataclass
class ConstantLrConfig(ScheduleConfig):
    """A fixed learning rate."""

    learning_rate: float = 0.1
    """The learning rate. Defaults to 0.1."""


@dataclasses.dataclass
class StepwiseLrConfig(ScheduleConfig):
    """Piecewise-constant rate: `values[i]` until step `boundaries[i]`, then the next."""

    boundaries: list[int] = _field(default_factory=list)
    """Steps where the rate changes, increasing. Defaults to []."""
    values: list[float] = _field(default_factory=list)
    """Rates, one more than `boundaries`. Defaults to []."""
    offset: int = 0
    """Steps subtracted from the global step before the schedule. Defaults to 0."""


@dataclasses.dataclass
class ExponentialLrConfig(ScheduleConfig):
    """`initial_learning_rate * decay_rate ** (step / decay_steps)`."""

    initial_learning_rate: float = 0.1
    """Rate at step 0. Defaults to 0.1."""
    decay_steps: int = 1
    """Steps per decay period. Defaults to 1."""
    decay_rate: float = 0.96
    """Factor applied per period. Defaults to 0.96."""
    staircase: bool = False
    """Decay in whole periods (integer division). Defaults to False."""
    offset: int = 0
    """Steps subtracted from the global step before the schedule. Defaults to 0."""


@dataclasses.dataclass
class PolynomialLrConfig(ScheduleConfig):
    """Polynomial decay from `initial_learning_rate` to `end_learning_rate`."""

    initial_learning_rate: float = 0.1
    """Rate at step 0. Defaults to 0.1."""
    decay_steps: int = 1
    """Steps over which the rate decays. Defaults to 1."""
    end_learning_rate: float = 1e-4
    """Rate after `decay_steps`. Defaults to 1e-4."""
    power: float = 1.0
    """Exponent of the polynomial (1.0 is linear). Defaults to 1.0."""
    cycle: bool = False
    """Restart the decay every `decay_steps` (with a growing period). Defaults to False."""
    offset: int = 0
    """Steps subtracted from the global step before the schedule. Defaults to 0."""


@dataclasses.dataclass
class CosineLrConfig(ScheduleConfig):
    """Cosine decay from `initial_learning_rate` to `alpha * initial_learning_rate`."""

    initial_learning_rate: float = 0.1
    """Rate at step 0. Defaults to 0.1."""
    decay_steps: int = 1
    """Steps over which the rate decays. Defaults to 1."""
    alpha: float = 0.0
    """Final rate as a fraction of the initial one. Defaults to 0.0."""
    offset: int = 0
    """Steps subtracted from the global step before the schedule. Defaults to 0."""


@dataclasses.dataclass
class PowerLrConfig(ScheduleConfig):
    """`initial_learning_rate * max(step, 1) ** power`."""

    initial_learning_rate: float = 0.1
    """Rate at step 1. Defaults to 0.1."""
    power: float = -0.5
    """Exponent applied to the step. Defaults to -0.5."""
    offset: int = 0
    """Steps subtracted from the global step before the schedule. Defaults to 0."""


@dataclasses.dataclass
class PowerAndLinearDecayLrConfig(ScheduleConfig):
    """``power_linear``: ``lr * max(t, 1) ** power``, times a linear ramp to zero over the
    last ``linear_decay_fraction`` of ``total_decay_steps`` (``t = step - offset``)."""

    initial_learning_rate: float = 0.1
    """Rate at steps 0 and 1. Defaults to 0.1."""
    total_decay_steps: int = 1
    """Step (after the offset) at which the rate reaches zero. Defaults to 1."""
    power: float = -0.5
    """Exponent applied to the step. Defaults to -0.5."""
    linear_decay_fraction: float = 0.1
    """Fraction of ``total_decay_steps`` over which the linear ramp runs. Defaults to 0.1."""
    offset: int = 0
    """Steps subtracted from the global step before the schedule. Defaults to 0."""


@dataclasses.dataclass
class PowerDecayWithOffsetLrConfig(ScheduleConfig):
    """``power_with_offset``: ``pre_offset_learning_rate`` up to step ``offset``, then
    ``lr * max(step - offset, 1) ** power``, capped at ``pre_offset_learning_rate``."""

    initial_learning_rate: float = 0.1
    """Multiplier of the power decay. Defaults to 0.1."""
    power: float = -0.5
    """Exponent applied to the step. Defaults to -0.5."""
    offset: int = 0
    """Step where the power decay starts. Defaults to 0."""
    pre_offset_learning_rate: float = 1.0e6
    """Rate up to ``offset``, and the cap afterwards. Defaults to 1e6."""


@dataclasses.dataclass
class StepCosineLrConfig(ScheduleConfig):
    """``step_cosine_with_offset``: segment ``i`` (from ``boundaries[i]``) decays along a
    cosine from ``values[i]`` to ``values[i + 1]`` over ``boundaries[i + 1] - boundaries[i]``
    steps."""

    boundaries: list[int] = _field(default_factory=list)
    """Segment starts, strictly increasing (usually from 0). Defaults to []."""
    values: list[float] = _field(default_factory=list)
    """Rate at the start of each segment; as many as ``boundaries``. Defaults to []."""
    offset: int = 0
    """Steps subtracted from the global step before the schedule. Defaults to 0."""


@dataclasses.dataclass
class LinearWarmupConfig(ScheduleConfig):
    """Linear ramp from `warmup_learning_rate` to the schedule's rate at `warmup_steps`."""

    warmup_learning_rate: float = 0.0
    """Rate at step 0. Defaults to 0.0."""
    warmup_steps: int = 0
    """Length of the ramp; 0 disables warmup. Defaults to 0."""


@dataclasses.dataclass
class PolynomialWarmupConfig(ScheduleConfig):
    """Rate at `warmup_steps` times `(max(step, 1) / warmup_steps) ** power`."""

    power: float = 1.0
    """Exponent of the ramp. Defaults to 1.0."""
    warmup_steps: int = 0
    """Length of the ramp; 0 or less disables warmup. Defaults to 0."""
