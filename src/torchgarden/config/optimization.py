"""Optimizer, learning-rate, warmup and EMA configs (Model Garden's `optimization`).

The YAML shape matches Model Garden's, so this pastes unchanged::

    trainer:
      optimizer_config:
        optimizer: {type: sgd, sgd: {momentum: 0.9}}
        learning_rate: {type: cosine, cosine: {initial_learning_rate: 1.6, decay_steps: 3500}}
        warmup: {type: linear, linear: {warmup_steps: 50}}
        ema: {average_decay: 0.9999}
"""

from __future__ import annotations

import dataclasses

from torchgarden.config.base import Config
from torchgarden.config.oneof import OneOfConfig

__all__ = [
    "AdagradConfig",
    "AdamConfig",
    "AdamWConfig",
    "BaseOptimizerConfig",
    "ConstantLrConfig",
    "CosineLrConfig",
    "EMAConfig",
    "ExponentialLrConfig",
    "LinearWarmupConfig",
    "LrConfig",
    "OptimizationConfig",
    "OptimizerConfig",
    "PolynomialLrConfig",
    "PolynomialWarmupConfig",
    "PowerLrConfig",
    "RMSpropConfig",
    "SGDConfig",
    "StepwiseLrConfig",
    "WarmupConfig",
]

_field = dataclasses.field


# ------------------------------------------------------------------ optimizers
@dataclasses.dataclass
class BaseOptimizerConfig(Config):
    """Fields shared by every optimizer. The learning rate comes from `LrConfig`."""

    clipnorm: float | None = None
    """Clip each parameter's gradient to this L2 norm; None disables. Defaults to None."""
    clipvalue: float | None = None
    """Clip gradient values to [-clipvalue, clipvalue]; None disables. Defaults to None."""
    global_clipnorm: float | None = None
    """Clip the global L2 norm of all gradients; None disables. Defaults to None."""
    fused: bool | None = None
    """True: torch's fused kernel (faster on CPU and CUDA, rounds differently from a
    hand-written loop). None or False: torch's default implementation, bitwise equal to
    ``torch.optim.X(model.parameters(), ...)`` with torch's defaults. Defaults to None."""


@dataclasses.dataclass
class SGDConfig(BaseOptimizerConfig):
    """Stochastic gradient descent (`torch.optim.SGD`)."""

    momentum: float = 0.0
    """Momentum factor. Defaults to 0.0."""
    nesterov: bool = False
    """Use Nesterov momentum. Defaults to False."""
    weight_decay: float = 0.0
    """L2 penalty added to the gradient. Defaults to 0.0."""


@dataclasses.dataclass
class AdamConfig(BaseOptimizerConfig):
    """Adam (`torch.optim.Adam`), with Keras' default epsilon."""

    beta_1: float = 0.9
    """Decay rate of the first-moment estimate. Defaults to 0.9."""
    beta_2: float = 0.999
    """Decay rate of the second-moment estimate. Defaults to 0.999."""
    epsilon: float = 1e-7
    """Numerical-stability term. Defaults to 1e-7 (Keras; PyTorch uses 1e-8)."""
    amsgrad: bool = False
    """Use the AMSGrad variant. Defaults to False."""
    weight_decay: float = 0.0
    """L2 penalty added to the gradient. Defaults to 0.0."""


@dataclasses.dataclass
class AdamWConfig(BaseOptimizerConfig):
    """Adam with decoupled weight decay (`torch.optim.AdamW`)."""

    beta_1: float = 0.9
    """Decay rate of the first-moment estimate. Defaults to 0.9."""
    beta_2: float = 0.999
    """Decay rate of the second-moment estimate. Defaults to 0.999."""
    epsilon: float = 1e-7
    """Numerical-stability term. Defaults to 1e-7."""
    amsgrad: bool = False
    """Use the AMSGrad variant. Defaults to False."""
    weight_decay_rate: float = 0.0
    """Decoupled weight-decay rate. Defaults to 0.0."""
    exclude_from_weight_decay: list[str] = _field(default_factory=list)
    """Parameter-name substrings that get no weight decay (e.g. `bias`, `norm`).
    Defaults to []."""


@dataclasses.dataclass
class RMSpropConfig(BaseOptimizerConfig):
    """RMSprop (`torch.optim.RMSprop`)."""

    rho: float = 0.9
    """Discount factor of the squared-gradient average (PyTorch's `alpha`). Defaults to 0.9."""
    momentum: float = 0.0
    """Momentum factor. Defaults to 0.0."""
    epsilon: float = 1e-7
    """Numerical-stability term. Defaults to 1e-7."""
    centered: bool = False
    """Normalise by the estimated gradient variance. Defaults to False."""
    weight_decay: float = 0.0
    """L2 penalty added to the gradient. Defaults to 0.0."""


@dataclasses.dataclass
class AdagradConfig(BaseOptimizerConfig):
    """Adagrad (`torch.optim.Adagrad`)."""

    initial_accumulator_value: float = 0.1
    """Starting value of the squared-gradient accumulators. Defaults to 0.1."""
    epsilon: float = 1e-7
    """Numerical-stability term. Defaults to 1e-7."""
    weight_decay: float = 0.0
    """L2 penalty added to the gradient. Defaults to 0.0."""


@dataclasses.dataclass
class OptimizerConfig(OneOfConfig):
    """Chooses the optimizer: `type` is one of `sgd, adam, adamw, rmsprop, adagrad`."""

    type: str | None = "sgd"
    """The optimizer in use. Defaults to "sgd"."""
    sgd: SGDConfig = _field(default_factory=SGDConfig)
    """Settings used when `type` is "sgd"."""
    adam: AdamConfig = _field(default_factory=AdamConfig)
    """Settings used when `type` is "adam"."""
    adamw: AdamWConfig = _field(default_factory=AdamWConfig)
    """Settings used when `type` is "adamw"."""
    rmsprop: RMSpropConfig = _field(default_factory=RMSpropConfig)
    """Settings used when `type` is "rmsprop"."""
    adagrad: AdagradConfig = _field(default_factory=AdagradConfig)
    """Settings used when `type` is "adagrad"."""


# ------------------------------------------------------------- learning rates
@dataclasses.dataclass
class ConstantLrConfig(Config):
    """A fixed learning rate."""

    learning_rate: float = 0.1
    """The learning rate. Defaults to 0.1."""


@dataclasses.dataclass
class StepwiseLrConfig(Config):
    """Piecewise-constant rate: `values[i]` until step `boundaries[i]`, then the next."""

    boundaries: list[int] = _field(default_factory=list)
    """Steps where the rate changes, increasing. Defaults to []."""
    values: list[float] = _field(default_factory=list)
    """Rates, one more than `boundaries`. Defaults to []."""
    offset: int = 0
    """Steps subtracted from the global step before the schedule. Defaults to 0."""


@dataclasses.dataclass
class ExponentialLrConfig(Config):
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
class PolynomialLrConfig(Config):
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
class CosineLrConfig(Config):
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
class PowerLrConfig(Config):
    """`initial_learning_rate * max(step, 1) ** power`."""

    initial_learning_rate: float = 0.1
    """Rate at step 1. Defaults to 0.1."""
    power: float = -0.5
    """Exponent applied to the step. Defaults to -0.5."""
    offset: int = 0
    """Steps subtracted from the global step before the schedule. Defaults to 0."""


@dataclasses.dataclass
class LrConfig(OneOfConfig):
    """Chooses the schedule: `constant, stepwise, exponential, polynomial, cosine, power`."""

    type: str | None = "constant"
    """The schedule in use. Defaults to "constant"."""
    constant: ConstantLrConfig = _field(default_factory=ConstantLrConfig)
    """Settings used when `type` is "constant"."""
    stepwise: StepwiseLrConfig = _field(default_factory=StepwiseLrConfig)
    """Settings used when `type` is "stepwise"."""
    exponential: ExponentialLrConfig = _field(default_factory=ExponentialLrConfig)
    """Settings used when `type` is "exponential"."""
    polynomial: PolynomialLrConfig = _field(default_factory=PolynomialLrConfig)
    """Settings used when `type` is "polynomial"."""
    cosine: CosineLrConfig = _field(default_factory=CosineLrConfig)
    """Settings used when `type` is "cosine"."""
    power: PowerLrConfig = _field(default_factory=PowerLrConfig)
    """Settings used when `type` is "power"."""


# --------------------------------------------------------------------- warmup
@dataclasses.dataclass
class LinearWarmupConfig(Config):
    """Linear ramp from `warmup_learning_rate` to the schedule's rate at `warmup_steps`."""

    warmup_learning_rate: float = 0.0
    """Rate at step 0. Defaults to 0.0."""
    warmup_steps: int = 0
    """Length of the ramp; 0 disables warmup. Defaults to 0."""


@dataclasses.dataclass
class PolynomialWarmupConfig(Config):
    """Rate at `warmup_steps` times `(max(step, 1) / warmup_steps) ** power`."""

    power: float = 1.0
    """Exponent of the ramp. Defaults to 1.0."""
    warmup_steps: int = 0
    """Length of the ramp; 0 or less disables warmup. Defaults to 0."""


@dataclasses.dataclass
class WarmupConfig(OneOfConfig):
    """Chooses the warmup: `linear`, `polynomial`, or None for no warmup."""

    type: str | None = None
    """The warmup in use, or None. Defaults to None."""
    linear: LinearWarmupConfig = _field(default_factory=LinearWarmupConfig)
    """Settings used when `type` is "linear"."""
    polynomial: PolynomialWarmupConfig = _field(default_factory=PolynomialWarmupConfig)
    """Settings used when `type` is "polynomial"."""


# ------------------------------------------------------------------------ EMA
@dataclasses.dataclass
class EMAConfig(Config):
    """Exponential moving average of the weights, swapped in for evaluation."""

    trainable_weights_only: bool = True
    """Average only parameters that require gradients (not buffers). Defaults to True."""
    average_decay: float = 0.99
    """Decay of the average. Defaults to 0.99."""
    start_step: int = 0
    """Decay is 0 (the average copies the weights) before this step. Defaults to 0."""
    dynamic_decay: bool = True
    """Use `min(average_decay, (1 + t) / (10 + t))` with `t = step - start_step`.
    Defaults to True."""


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
    turns it on. Defaults to None."""
