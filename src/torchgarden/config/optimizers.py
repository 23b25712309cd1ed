"""Optimizer configs, one per ``trainer.optimizer_config.optimizer.type``, and the
`OptimizerConfig` that picks one.

Field names and defaults are Model Garden's (``optimizer_config.py``) so that a pasted
``optimizer`` block reads unchanged; the porting guide lists the few documented renames.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

from torchgarden.config.base import Config
from torchgarden.config.errors import choose
from torchgarden.config.notices import ModelGardenKey, mapped
from torchgarden.config.oneof import OneOfConfig

__all__ = [
    "AdafactorConfig", "AdagradConfig", "AdamConfig", "AdamExperimentalConfig",
    "AdamMomentsConfig", "AdamWConfig", "AdamWExperimentalConfig", "BaseOptimizerConfig",
    "LAMBConfig", "LARSConfig", "OptimizerConfig", "RMSpropConfig", "SGDConfig",
    "SGDExperimentalConfig", "SGDTorchConfig",
]

_field = dataclasses.field


def _one_regex(value: Any) -> Any:
    """A single pattern string (Model Garden accepts one) as the list of one regex."""
    return [value] if isinstance(value, str) else value


def _check_update_rule(config: Config) -> None:
    choose(config, "update_rule", ("torch", "keras"))


_ONE_REGEX = mapped(convert=_one_regex, note="one regex, matched with re.search on parameter "
                    "names")


def _pattern_keys(*names: str) -> dict[str, ModelGardenKey]:
    """Pattern-list keys that also take one regex string, as Model Garden's do."""
    return dict.fromkeys(names, _ONE_REGEX)


@dataclasses.dataclass
class BaseOptimizerConfig(Config):
    """Fields shared by every optimizer. The learning rate comes from `LrConfig`."""

    clipnorm: float | None = None
    """Clip each parameter's gradient to this L2 norm; None disables."""
    clipvalue: float | None = None
    """Clip gradient values to [-clipvalue, clipvalue]; None disables."""
    global_clipnorm: float | None = None
    """Clip the global L2 norm of all gradients; None disables."""
    fused: bool | None = None
    """True: torch's fused kernel (faster, rounds differently). None or False: torch's default
    implementation, bitwise equal to ``torch.optim.X(params, ...)``."""
    name: str | None = None
    """Model Garden's display name of the optimizer; accepted so pasted configs read,
    unused by torch."""


@dataclasses.dataclass
class SGDConfig(BaseOptimizerConfig):
    """Stochastic gradient descent (`torch.optim.SGD`) with Model Garden's options."""

    momentum: float = 0.0
    """Momentum factor."""
    nesterov: bool = False
    """Use Nesterov momentum."""
    weight_decay: float = 0.0
    """L2 penalty added to the gradient."""
    decay: float = 0.0
    """Keras' legacy inverse-time decay (0 is off): the rate at step ``t`` is
    ``schedule(t) / (1 + decay * t)``."""
    update_rule: str = "torch"
    """"torch": torch's update (fused kernels; equal to ``torch.optim`` by hand); "keras":
    Keras' update, as Model Garden runs it (`torchgarden.optim.keras_rules`)."""

    def check(self) -> None:
        """Checks the update rule."""
        _check_update_rule(self)


@dataclasses.dataclass
class SGDExperimentalConfig(BaseOptimizerConfig):
    """Model Garden's ``sgd_experimental`` (the new Keras SGD): `torch.optim.SGD`."""

    momentum: float = 0.0
    """Momentum factor."""
    nesterov: bool = False
    """Use Nesterov momentum."""
    jit_compile: bool = False
    """Keras' XLA switch; True is an error pointing to ``runtime.enable_xla``."""
    update_rule: str = "torch"
    """"torch": torch's update (fused kernels; equal to ``torch.optim`` by hand); "keras":
    Keras' update, as Model Garden runs it (`torchgarden.optim.keras_rules`)."""

    def check(self) -> None:
        """Checks the update rule."""
        _check_update_rule(self)


@dataclasses.dataclass
class AdamMomentsConfig(BaseOptimizerConfig):
    """The moment settings shared by the Adam family, with Keras' default epsilon."""

    beta_1: float = 0.9
    """Decay rate of the first-moment estimate."""
    beta_2: float = 0.999
    """Decay rate of the second-moment estimate."""
    epsilon: float = 1e-7
    """Numerical-stability term (Keras' default; PyTorch's is 1e-8)."""
    amsgrad: bool = False
    """Use the AMSGrad variant."""
    update_rule: str = "torch"
    """"torch": torch's update (fused kernels; equal to ``torch.optim`` by hand); "keras":
    Keras' update, as Model Garden runs it (`torchgarden.optim.keras_rules`)."""

    def check(self) -> None:
        """Checks the update rule."""
        _check_update_rule(self)


@dataclasses.dataclass
class AdamConfig(AdamMomentsConfig):
    """Adam (`torch.optim.Adam`), with Keras' default epsilon."""

    weight_decay: float = 0.0
    """L2 penalty added to the gradient."""


@dataclasses.dataclass
class AdamExperimentalConfig(AdamConfig):
    """Model Garden's ``adam_experimental`` (the new Keras Adam): `torch.optim.Adam`."""

    jit_compile: bool = False
    """Keras' XLA switch; True is an error pointing to ``runtime.enable_xla``."""


@dataclasses.dataclass
class AdamWConfig(AdamMomentsConfig):
    """Adam with decoupled weight decay (`torch.optim.AdamW`), Model Garden's ``adamw``."""

    MODEL_GARDEN_KEYS: ClassVar[Mapping[str, ModelGardenKey]] = _pattern_keys(
        "include_in_weight_decay", "exclude_from_weight_decay")

    weight_decay_rate: float = 0.0
    """Decoupled weight-decay rate."""
    include_in_weight_decay: list[str] | None = None
    """Regexes (``re.search`` on parameter names); a match always decays, even when an
    ``exclude_from_weight_decay`` pattern also matches."""
    exclude_from_weight_decay: list[str] | None = None
    """Regexes (``re.search`` on parameter names, e.g. ``bias``, ``norm``) that get no
    weight decay."""
    gradient_clip_norm: float | None = 1.0
    """Clip the global gradient norm to this value (Model Garden's default 1.0) before the
    ``clipnorm`` / ``clipvalue`` / ``global_clipnorm`` clips, as in Model Garden; 0 (or
    None) does not clip."""


@dataclasses.dataclass
class AdamWExperimentalConfig(AdamMomentsConfig):
    """Model Garden's ``adamw_experimental`` (Keras AdamW): `torch.optim.AdamW`."""

    weight_decay: float = 0.0
    """Decoupled weight-decay rate."""
    global_clipnorm: float | None = 1.0
    """Clip the global gradient norm (Model Garden's default 1.0)."""
    jit_compile: bool = False
    """Keras' XLA switch; True is an error pointing to ``runtime.enable_xla``."""


@dataclasses.dataclass
class RMSpropConfig(BaseOptimizerConfig):
    """RMSprop (`torch.optim.RMSprop`)."""

    rho: float = 0.9
    """Discount factor of the squared-gradient average (PyTorch's `alpha`)."""
    momentum: float = 0.0
    """Momentum factor."""
    epsilon: float = 1e-7
    """Numerical-stability term."""
    centered: bool = False
    """Normalise by the estimated gradient variance."""
    weight_decay: float = 0.0
    """L2 penalty added to the gradient."""
    update_rule: str = "torch"
    """"torch": torch's update (fused kernels; equal to ``torch.optim`` by hand); "keras":
    Keras' update, as Model Garden runs it (`torchgarden.optim.keras_rules`)."""

    def check(self) -> None:
        """Checks the update rule."""
        _check_update_rule(self)


@dataclasses.dataclass
class AdagradConfig(BaseOptimizerConfig):
    """Adagrad (`torch.optim.Adagrad`)."""

    initial_accumulator_value: float = 0.1
    """Starting value of the squared-gradient accumulators."""
    epsilon: float = 1e-7
    """Numerical-stability term."""
    weight_decay: float = 0.0
    """L2 penalty added to the gradient."""


@dataclasses.dataclass
class LAMBConfig(BaseOptimizerConfig):
    """LAMB (You et al., 2019; TF Addons' rule): `torchgarden.optim.LAMB`."""

    MODEL_GARDEN_KEYS: ClassVar[Mapping[str, ModelGardenKey]] = _pattern_keys(
        "exclude_from_weight_decay", "exclude_from_layer_adaptation")

    beta_1: float = 0.9
    """Decay rate of the first-moment estimate."""
    beta_2: float = 0.999
    """Decay rate of the second-moment estimate."""
    epsilon: float = 1e-6
    """Added to the bias-corrected root second moment."""
    weight_decay_rate: float = 0.0
    """Decoupled weight decay added to the update before the trust ratio."""
    exclude_from_weight_decay: list[str] | None = None
    """Regexes (``re.search`` on parameter names) that get no weight decay."""
    exclude_from_layer_adaptation: list[str] | None = None
    """Regexes whose parameters use trust ratio 1; None: the same as
    ``exclude_from_weight_decay``."""


@dataclasses.dataclass
class LARSConfig(BaseOptimizerConfig):
    """LARS (You et al., 2017; Model Garden's rule): `torchgarden.optim.LARS`."""

    MODEL_GARDEN_KEYS: ClassVar[Mapping[str, ModelGardenKey]] = _pattern_keys(
        "exclude_from_weight_decay", "exclude_from_layer_adaptation")

    momentum: float = 0.9
    """Momentum factor."""
    eeta: float = 0.001
    """LARS coefficient: the trust ratio is ``eeta * ||w|| / ||g||``."""
    weight_decay_rate: float = 0.0
    """L2 term added to the gradient before the trust ratio."""
    nesterov: bool = False
    """Use Nesterov momentum."""
    classic_momentum: bool = True
    """True: the scaled rate enters the momentum; False ("popular" momentum): the trust
    ratio is taken on the momentum update."""
    exclude_from_weight_decay: list[str] | None = None
    """Regexes (``re.search`` on parameter names) that get no weight decay."""
    exclude_from_layer_adaptation: list[str] | None = None
    """Regexes whose parameters use trust ratio 1; None: the same as
    ``exclude_from_weight_decay``."""


@dataclasses.dataclass
class AdafactorConfig(BaseOptimizerConfig):
    """Adafactor (Shazeer & Stern, 2018): `torch.optim.Adafactor`.

    Model Garden's open-source ``adafactor`` class is a placeholder; torch's is the
    paper's algorithm with relative step ``min(lr, 1/sqrt(t))`` and parameter-scale
    multiplication. Settings torch cannot honour are errors, never ignored.
    """

    factored: bool = True
    """Factor the second moment of matrices (torch always does)."""
    multiply_by_parameter_scale: bool = True
    """Scale the step by the parameter's RMS (torch always does)."""
    beta1: float | None = None
    """First-moment decay; torch's Adafactor has no momentum, so only None."""
    decay_rate: float = 0.8
    """Second-moment decay exponent: ``beta2_t = 1 - t ** -decay_rate`` (torch's
    ``beta2_decay = -decay_rate``)."""
    step_offset: int = 0
    """Step offset of the decay; only 0."""
    clipping_threshold: float = 1.0
    """Update clipping threshold (torch's ``d``)."""
    min_dim_size_to_factor: int = 128
    """Model Garden factors only matrices whose dims reach this; torch factors every
    matrix, so only values <= 1 are exact and others log a warning."""
    epsilon1: float = 1e-30
    """Added to squared gradients (torch's ``eps[0]``)."""
    epsilon2: float = 1e-3
    """Floor of the parameter RMS (torch's ``eps[1]``)."""
    weight_decay: float | None = None
    """Decoupled weight decay; None is 0."""
    include_in_weight_decay: str | None = None
    """One regex; when set, only matching parameters decay."""


@dataclasses.dataclass
class SGDTorchConfig(BaseOptimizerConfig):
    """Model Garden's ``sgd_torch`` (its YOLO project's "PyTorch SGD"): `torchgarden.optim.SGDTorch`.

    Weight decay is added to the gradient of the parameters a ``weight_keys`` regex matches
    (none to the others); momentum ramps linearly from ``momentum_start`` to ``momentum``
    over the first ``warmup_steps`` optimizer steps; the step is torch SGD's.
    """

    MODEL_GARDEN_KEYS: ClassVar[Mapping[str, ModelGardenKey]] = _pattern_keys(
        "weight_keys", "bias_keys")
    momentum: float = 0.9
    """Momentum after the warmup (Model Garden's default 0.9)."""
    momentum_start: float = 0.0
    """Momentum at step 0, ramped linearly to ``momentum`` over ``warmup_steps``."""
    warmup_steps: int = 0
    """Optimizer steps of the momentum ramp; must be >= 1 with momentum (Model Garden divides
    by it at step 0); ``momentum_start: <momentum>`` gives no ramp."""
    nesterov: bool = False
    """Use Nesterov momentum."""
    weight_decay: float = 0.0
    """L2 term added to the gradients of the ``weight_keys`` parameters."""
    weight_keys: list[str] | None = _field(default_factory=lambda: ["kernel", "weight"])
    """Regexes (``re.search`` on parameter names) of the parameters that decay."""
    bias_keys: list[str] | None = _field(default_factory=lambda: ["bias", "beta"])
    """Regexes of the bias parameters (no weight decay; the same learning rate here)."""
    decay: float = 0.0
    """Keras' legacy inverse-time decay (0 is off), as ``sgd``'s."""


@dataclasses.dataclass
class OptimizerConfig(OneOfConfig):
    """Chooses the optimizer: `type` names one of the fields below (Model Garden's names),
    which holds that optimizer's settings."""

    type: str | None = None
    """The optimizer in use; required (Model Garden leaves it unset, and building the
    optimizer without it is an error)."""
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
    sgd_torch: SGDTorchConfig = _field(default_factory=SGDTorchConfig)
