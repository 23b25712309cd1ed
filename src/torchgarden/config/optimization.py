"""Optimizer, learning-rate, warmup and EMA configs (Model Garden's `optimization`).

The YAML shape matches Model Garden's, so this pastes unchanged::

    trainer:
      optimizer_config:
        optimizer: {type: sgd, sgd: {momentum: 0.9}}
        learning_rate: {type: cosine, cosine: {initial_learning_rate: 1.6, decay_steps: 3500}}
        warmup: {type: linear, linear: {warmup_steps: 50}}
        ema: {average_decay: 0.9999}

The schedules and warmups below (one per ``learning_rate.type`` / ``warmup.type``) keep
Model Garden's field names and defaults (``learning_rate_config.py``); the optimizers
and their `OptimizerConfig` live in `torchgarden.config.optimizers`.
"""

from __future__ import annotations

import dataclasses
import math

from torchgarden.config.base import Config
from torchgarden.config.errors import ConfigError
from torchgarden.config.oneof import OneOfConfig
from torchgarden.config.optimizers import OptimizerConfig

__all__ = [
    "ConstantLrConfig", "CosineLrConfig", "EMAConfig", "ExponentialLrConfig",
    "LinearWarmupConfig", "LrConfig", "OptimizationConfig", "PolynomialLrConfig",
    "PolynomialWarmupConfig", "PowerAndLinearDecayLrConfig", "PowerDecayWithOffsetLrConfig",
    "PowerLrConfig", "ScheduleConfig", "StepCosineLrConfig", "StepwiseLrConfig", "WarmupConfig",
]

_field = dataclasses.field


# ------------------------------------------------------------ schedules and warmups
@dataclasses.dataclass
class ScheduleConfig(Config):
    """Fields shared by every schedule and warmup config."""

    name: str | None = None
    """Model Garden's display name of the schedule; accepted so pasted configs read, unused."""

    def check(self) -> None:
        """Every rate the user sets (``*learning_rate``, the ``values`` of piecewise
        schedules) must be finite and >= 0; the error names that field and its value."""
        for field in dataclasses.fields(self):
            name, rates = field.name, getattr(self, field.name)
            if not (name.endswith("learning_rate") or name == "values"):
                continue
            for rate in rates if isinstance(rates, list) else [rates]:
                # NaN is left to Config._validate, which says "is NaN" for every field;
                # None (unset) to the build, which requires the fields Model Garden does.
                if rate is not None and not (math.isfinite(rate) and rate >= 0
                                             or math.isnan(rate)):
                    key = self.field_path(name)
                    raise ConfigError(f"{key} is {rates!r}; a learning rate must be finite and "
                                      ">= 0", key=key)


@dataclasses.dataclass
class ConstantLrConfig(ScheduleConfig):
    """A fixed learning rate."""

    learning_rate: float = 0.1
    """The learning rate."""


@dataclasses.dataclass
class StepwiseLrConfig(ScheduleConfig):
    """Piecewise-constant rate: `values[i]` until step `boundaries[i]`, then the next."""

    boundaries: list[int] | None = None
    """Steps where the rate changes, increasing; required (Model Garden leaves it unset)."""
    values: list[float] | None = None
    """Rates, one more than `boundaries`; required."""
    offset: int = 0
    """Steps subtracted from the global step before the schedule."""


@dataclasses.dataclass
class ExponentialLrConfig(ScheduleConfig):
    """`initial_learning_rate * decay_rate ** (step / decay_steps)`."""

    initial_learning_rate: float | None = None
    """Rate at step 0; required (Model Garden leaves it unset)."""
    decay_steps: int | None = None
    """Steps per decay period; required."""
    decay_rate: float | None = None
    """Factor applied per period; required."""
    staircase: bool = False
    """Decay in whole periods (integer division)."""
    offset: int = 0
    """Steps subtracted from the global step before the schedule."""


@dataclasses.dataclass
class PolynomialLrConfig(ScheduleConfig):
    """Polynomial decay from `initial_learning_rate` to `end_learning_rate`."""

    initial_learning_rate: float | None = None
    """Rate at step 0; required (Model Garden leaves it unset)."""
    decay_steps: int | None = None
    """Steps over which the rate decays; required (-1: up to `trainer.train_steps`)."""
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

    initial_learning_rate: float | None = None
    """Rate at step 0; required (Model Garden leaves it unset)."""
    decay_steps: int | None = None
    """Steps over which the rate decays; required (-1: up to `trainer.train_steps`)."""
    alpha: float = 0.0
    """Final rate as a fraction of the initial one."""
    offset: int = 0
    """Steps subtracted from the global step before the schedule."""


@dataclasses.dataclass
class PowerLrConfig(ScheduleConfig):
    """`initial_learning_rate * max(step, 1) ** power`."""

    initial_learning_rate: float | None = None
    """Rate at step 1; required (Model Garden leaves it unset)."""
    power: float = -0.5
    """Exponent applied to the step."""
    offset: int = 0
    """Steps subtracted from the global step before the schedule."""


@dataclasses.dataclass
class PowerAndLinearDecayLrConfig(ScheduleConfig):
    """``power_linear``: ``lr * max(t, 1) ** power``, times a linear ramp to zero over the
    last ``linear_decay_fraction`` of ``total_decay_steps`` (``t = step - offset``)."""

    initial_learning_rate: float | None = None
    """Rate at steps 0 and 1; required (Model Garden leaves it unset)."""
    total_decay_steps: int | None = None
    """Step (after the offset) at which the rate reaches zero; required."""
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

    initial_learning_rate: float | None = None
    """Multiplier of the power decay; required (Model Garden leaves it unset)."""
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

    boundaries: list[int] | None = None
    """Segment starts, strictly increasing (usually from 0); required."""
    values: list[float] | None = None
    """Rate at the start of each segment; as many as ``boundaries``; required."""
    offset: int = 0
    """Steps subtracted from the global step before the schedule."""


@dataclasses.dataclass
class LinearWarmupConfig(ScheduleConfig):
    """Linear ramp from `warmup_learning_rate` to the schedule's rate at `warmup_steps`."""

    warmup_learning_rate: float = 0.0
    """Rate at step 0."""
    warmup_steps: int | None = None
    """Length of the ramp; required (Model Garden leaves it unset); 0 ramps nothing."""


@dataclasses.dataclass
class PolynomialWarmupConfig(ScheduleConfig):
    """Rate at `warmup_steps` times `(max(step, 1) / warmup_steps) ** power`."""

    power: float = 1.0
    """Exponent of the ramp."""
    warmup_steps: int | None = None
    """Length of the ramp; required (Model Garden leaves it unset); 0 or less ramps
    nothing."""


# ---------------------------------------------------------------- one-of choices
@dataclasses.dataclass
class LrConfig(OneOfConfig):
    """Chooses the schedule: `type` names one of the fields below (Model Garden's names),
    which holds that schedule's settings."""

    type: str | None = None
    """The schedule in use; required (Model Garden leaves it unset, and building the
    schedule without it is an error)."""
    constant: ConstantLrConfig = _field(default_factory=ConstantLrConfig)
    stepwise: StepwiseLrConfig = _field(default_factory=StepwiseLrConfig)
    exponential: ExponentialLrConfig = _field(default_factory=ExponentialLrConfig)
    polynomial: PolynomialLrConfig = _field(default_factory=PolynomialLrConfig)
    cosine: CosineLrConfig = _field(default_factory=CosineLrConfig)
    power: PowerLrConfig = _field(default_factory=PowerLrConfig)
    power_linear: PowerAndLinearDecayLrConfig = _field(
        default_factory=PowerAndLinearDecayLrConfig)
    power_with_offset: PowerDecayWithOffsetLrConfig = _field(
        default_factory=PowerDecayWithOffsetLrConfig)
    step_cosine_with_offset: StepCosineLrConfig = _field(default_factory=StepCosineLrConfig)


@dataclasses.dataclass
class WarmupConfig(OneOfConfig):
    """Chooses the warmup: `type` names the field holding its settings (`linear` or
    `polynomial`), or is None for no warmup."""

    type: str | None = None
    """The warmup in use, or None."""
    linear: LinearWarmupConfig = _field(default_factory=LinearWarmupConfig)
    polynomial: PolynomialWarmupConfig = _field(default_factory=PolynomialWarmupConfig)


# ------------------------------------------------------------------------ EMA
@dataclasses.dataclass
class EMAConfig(Config):
    """Exponential moving average of the weights, swapped in for evaluation."""

    trainable_weights_only: bool = True
    """Average only parameters that require gradients (not buffers)."""
    average_decay: float = 0.99
    """Decay of the average."""
    start_step: int = 0
    """Decay is 0 (the average copies the weights) before this step."""
    dynamic_decay: bool = True
    """Use `min(average_decay, (1 + t) / (10 + t))` with `t = step - start_step`."""
    name: str | None = None
    """Model Garden's display name; accepted so pasted configs read, unused."""


@dataclasses.dataclass
class OptimizationConfig(Config):
    """Optimizer, learning-rate schedule, warmup and optional EMA."""

    optimizer: OptimizerConfig = _field(default_factory=OptimizerConfig)
    """The optimizer (one-of); its `type` must be set, as in Model Garden."""
    learning_rate: LrConfig = _field(default_factory=LrConfig)
    """The learning-rate schedule (one-of); its `type` must be set, as in Model Garden."""
    warmup: WarmupConfig = _field(default_factory=WarmupConfig)
    """The warmup (one-of). Defaults to none."""
    ema: EMAConfig | None = None
    """Weight averaging; None disables it. A mapping such as `{average_decay: 0.9999}`
    turns it on."""

    def check_buildable(self, path: str = "trainer.optimizer_config") -> None:
        """Raises what building the optimizer and schedule would, before anything is built.

        As in Model Garden's ``OptimizerFactory``: the optimizer's and the learning rate's
        ``type`` must be set, and so must every field of the chosen schedule and warmup that
        Model Garden leaves unset (``initial_learning_rate``, ``decay_steps``,
        ``boundaries``, ``warmup_steps``, ...): none is filled in silently.

        Raises:
            ConfigError: Naming the unset key.
        """
        for name in ("optimizer", "learning_rate"):
            oneof = getattr(self, name)
            if oneof.type in (None, ""):
                raise ConfigError(
                    f"{path}.{name}.type is not set (Model Garden raises too); set it to one "
                    f"of {', '.join(oneof.alternatives())}", key=f"{path}.{name}.type")
        for name in ("learning_rate", "warmup"):
            oneof = getattr(self, name)
            chosen = oneof.get() if oneof.type not in (None, "") else None
            for field in _required_fields(chosen):
                if getattr(chosen, field) is None:
                    key = f"{path}.{name}.{oneof.type}.{field}"
                    raise ConfigError(f"{key} must be set: Model Garden leaves it unset and "
                                      f"has no default for it", key=key)


def _required_fields(config: Config | None) -> list[str]:
    """The fields of a schedule or warmup config that default to None (Model Garden's
    required ones), ``name`` aside."""
    if config is None:
        return []
    return [f.name for f in dataclasses.fields(config)
            if f.default is None and f.name != "name"]
