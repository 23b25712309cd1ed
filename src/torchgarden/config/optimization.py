"""Optimizer, learning-rate, warmup and EMA configs (Model Garden's `optimization`).

The YAML shape matches Model Garden's, so this pastes unchanged::

    trainer:
      optimizer_config:
        optimizer: {type: sgd, sgd: {momentum: 0.9}}
        learning_rate: {type: cosine, cosine: {initial_learning_rate: 1.6, decay_steps: 3500}}
        warmup: {type: linear, linear: {warmup_steps: 50}}
        ema: {average_decay: 0.9999}

The alternatives live in `torchgarden.config.optimizers` and
`torchgarden.config.learning_rates`; this module holds the one-of choices.
"""

from __future__ import annotations

import dataclasses

from torchgarden.config.base import Config
from torchgarden.config.learning_rates import (
    ConstantLrConfig,
    CosineLrConfig,
    ExponentialLrConfig,
    LinearWarmupConfig,
    PolynomialLrConfig,
    PolynomialWarmupConfig,
    PowerAndLinearDecayLrConfig,
    PowerDecayWithOffsetLrConfig,
    PowerLrConfig,
    StepCosineLrConfig,
    StepwiseLrConfig,
)
from torchgarden.config.oneof import OneOfConfig
from torchgarden.config.optimizers import (
    AdafactorConfig,
    AdagradConfig,
    AdamConfig,
    AdamExperimentalConfig,
    AdamWConfig,
    AdamWExperimentalConfig,
    LAMBConfig,
    LARSConfig,
    RMSpropConfig,
    SGDConfig,
    SGDExperimentalConfig,
)

__all__ = ["EMAConfig", "LrConfig", "OptimizationConfig", "OptimizerConfig", "WarmupConfig"]

_field = dataclasses.field


@dataclasses.dataclass
class OptimizerConfig(OneOfConfig):
    """Chooses the optimizer: `type` names one of the fields below (Model Garden's names),
    which holds that optimizer's settings."""

    type: str | None = "sgd"
    """The optimizer in use."""
    sgd: SGDConfig = _field(default_factory=SGDConfig)
    sgd_experimental: SGDExperimentalConfig = _field(default_factory=SGDExperimentalConfig)
    adam: AdamConfig = _field(default_factory=AdamConfig)
    adam_experimental: AdamExperimentalConfig = _field(default_factory=AdamExperimentalConfig)
    adamw: AdamWConfig = _field(default_factory=AdamWConfig)
    adamw_experimental: AdamWExperimentalConfig = _field(
        default_factory=AdamWExperimentalConfig)
    lamb: LAMBConfig = _field(default_factory=LAMBConfig)
    rmsprop: RMSpropConfig = _field(default_factory=RMSpropConfig)
    lars: LARSConfig = _field(default_factory=LARSConfig)
    adagrad: AdagradConfig = _field(default_factory=AdagradConfig)
    adafactor: AdafactorConfig = _field(default_factory=AdafactorConfig)


@dataclasses.dataclass
class LrConfig(OneOfConfig):
    """Chooses the schedule: `type` names one of the fields below (Model Garden's names),
    which holds that schedule's settings."""

    type: str | None = "constant"
    """The schedule in use."""
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
    """The optimizer (one-of). Defaults to SGD."""
    learning_rate: LrConfig = _field(default_factory=LrConfig)
    """The learning-rate schedule (one-of). Defaults to constant 0.1."""
    warmup: WarmupConfig = _field(default_factory=WarmupConfig)
    """The warmup (one-of). Defaults to none."""
    ema: EMAConfig | None = None
    """Weight averaging; None disables it. A mapping such as `{average_decay: 0.9999}`
    turns it on."""
