"""Turning ``OptimizationConfig.learning_rate`` / ``.warmup`` into a schedule."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from torchgarden.optim._config_access import OPTIMIZATION_PATH, selected
from torchgarden.optim.model_garden_schedules import (
    InverseTimeDecay,
    PowerAndLinearDecay,
    PowerDecayWithOffset,
    StepCosineDecayWithOffset,
)
from torchgarden.optim.schedules import (
    ConstantSchedule,
    CosineDecay,
    ExponentialDecay,
    LearningRateSchedule,
    LinearWarmup,
    PiecewiseConstantDecay,
    PolynomialDecay,
    PolynomialWarmup,
    PowerDecay,
)

if TYPE_CHECKING:
    from torchgarden.config import OptimizationConfig

__all__ = ["build_learning_rate"]

# type -> schedule class; the config fields are the class's constructor arguments.
_SCHEDULES: dict[str, type[LearningRateSchedule]] = {
    "constant": ConstantSchedule,
    "stepwise": PiecewiseConstantDecay,
    "exponential": ExponentialDecay,
    "polynomial": PolynomialDecay,
    "cosine": CosineDecay,
    "power": PowerDecay,
    "power_linear": PowerAndLinearDecay,
    "power_with_offset": PowerDecayWithOffset,
    "step_cosine_with_offset": StepCosineDecayWithOffset,
}
_WARMUPS: dict[str, type[LearningRateSchedule]] = {
    "linear": LinearWarmup,
    "polynomial": PolynomialWarmup,
}


def build_learning_rate(optimization_config: OptimizationConfig) -> LearningRateSchedule:
    """Builds the learning-rate schedule of an ``OptimizationConfig``, warmup included.

    Args:
        optimization_config: Reads ``.learning_rate`` (one-of: ``constant``, ``stepwise``,
            ``exponential``, ``polynomial``, ``cosine``, ``power``, ``power_linear``,
            ``power_with_offset``, ``step_cosine_with_offset``), ``.warmup`` (one-of:
            unset, ``linear``, ``polynomial``) and the optimizer's legacy Keras ``decay``
            (``sgd``), which divides the rate by ``1 + decay * step``.

    Returns:
        A schedule; call it with the global step.

    Raises:
        ValueError: If a type is unknown (with the closest valid type) or a required
            field is unset.

    Example:
        >>> from torchgarden.config import OptimizationConfig
        >>> cfg = OptimizationConfig().override({
        ...     "learning_rate": {"type": "constant", "constant": {"learning_rate": 0.5}},
        ...     "warmup": {"type": "linear", "linear": {"warmup_steps": 10}}})
        >>> build_learning_rate(cfg)(5)
        0.25
    """
    lr_path = f"{OPTIMIZATION_PATH}.learning_rate"
    kind, sub_config = selected(optimization_config.learning_rate, lr_path, _SCHEDULES)
    schedule = _build(_SCHEDULES[kind], sub_config, f"{lr_path}.{kind}")
    warmup = getattr(optimization_config, "warmup", None)
    if warmup is not None and getattr(warmup, "type", None) not in (None, ""):
        warmup_path = f"{OPTIMIZATION_PATH}.warmup"
        kind, sub_config = selected(warmup, warmup_path, _WARMUPS)
        schedule = _build(_WARMUPS[kind], sub_config, f"{warmup_path}.{kind}", schedule)
    return _legacy_decay(optimization_config, schedule)


def _build(cls: type[LearningRateSchedule], sub_config: Any, path: str, *after: Any) -> Any:
    """``cls(*after, **fields)``: every other constructor argument is read from ``sub_config``.

    Raises:
        ValueError: If ``sub_config`` lacks one of them or holds None.
    """
    kwargs = {}
    for name in inspect.signature(cls).parameters:
        if name == "after":  # the warmed-up schedule
            continue
        value = getattr(sub_config, name, None)
        if value is None:
            found = "None" if hasattr(sub_config, name) else "no such field"
            raise ValueError(f"{path}.{name} must be set; got {found}.")
        kwargs[name] = value
    return cls(*after, **kwargs)


def _legacy_decay(optimization_config: Any, schedule: LearningRateSchedule) -> LearningRateSchedule:
    """Wraps ``schedule`` with the optimizer's Keras ``decay`` (applied after warmup, as the
    legacy Keras optimizer decays whatever rate it is given)."""
    optimizer = getattr(optimization_config, "optimizer", None)
    kind = getattr(optimizer, "type", None)
    # Only the sgd config has ``decay``; another type's sub-config has no such field.
    decay = getattr(getattr(optimizer, kind, None), "decay", None) if kind else None
    return InverseTimeDecay(schedule, decay) if decay else schedule
