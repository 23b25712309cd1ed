"""Turning ``OptimizationConfig.learning_rate`` / ``.warmup`` into a schedule."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchgarden.optim._config_access import OPTIMIZATION_PATH, REQUIRED, read_fields, selected
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

# type -> (schedule class, {config field: default}); the fields are the class's arguments.
_SCHEDULES: dict[str, tuple[type[LearningRateSchedule], dict[str, Any]]] = {
    "constant": (ConstantSchedule, {"learning_rate": 0.1}),
    "stepwise": (PiecewiseConstantDecay, {"boundaries": REQUIRED, "values": REQUIRED, "offset": 0}),
    "exponential": (
        ExponentialDecay,
        {
            "initial_learning_rate": REQUIRED,
            "decay_steps": REQUIRED,
            "decay_rate": REQUIRED,
            "staircase": False,
            "offset": 0,
        },
    ),
    "polynomial": (
        PolynomialDecay,
        {
            "initial_learning_rate": REQUIRED,
            "decay_steps": REQUIRED,
            "end_learning_rate": 1e-4,
            "power": 1.0,
            "cycle": False,
            "offset": 0,
        },
    ),
    "cosine": (
        CosineDecay,
        {"initial_learning_rate": REQUIRED, "decay_steps": REQUIRED, "alpha": 0.0, "offset": 0},
    ),
    "power": (PowerDecay, {"initial_learning_rate": REQUIRED, "power": -0.5, "offset": 0}),
    "power_linear": (
        PowerAndLinearDecay,
        {
            "initial_learning_rate": REQUIRED,
            "total_decay_steps": REQUIRED,
            "power": -0.5,
            "linear_decay_fraction": 0.1,
            "offset": 0,
        },
    ),
    "power_with_offset": (
        PowerDecayWithOffset,
        {
            "initial_learning_rate": REQUIRED,
            "power": -0.5,
            "offset": 0,
            "pre_offset_learning_rate": 1.0e6,
        },
    ),
    "step_cosine_with_offset": (
        StepCosineDecayWithOffset,
        {"boundaries": REQUIRED, "values": REQUIRED, "offset": 0},
    ),
}

_WARMUPS: dict[str, tuple[type[LearningRateSchedule], dict[str, Any]]] = {
    "linear": (LinearWarmup, {"warmup_steps": REQUIRED, "warmup_learning_rate": 0.0}),
    "polynomial": (PolynomialWarmup, {"warmup_steps": REQUIRED, "power": 1.0}),
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
        >>> from types import SimpleNamespace as NS
        >>> cfg = NS(learning_rate=NS(type="constant", constant=NS(learning_rate=0.5)),
        ...          warmup=NS(type="linear", linear=NS(warmup_steps=10,
        ...                                             warmup_learning_rate=0.0)))
        >>> build_learning_rate(cfg)(5)
        0.25
    """
    lr_path = f"{OPTIMIZATION_PATH}.learning_rate"
    kind, sub_config = selected(optimization_config.learning_rate, lr_path, _SCHEDULES)
    cls, fields = _SCHEDULES[kind]
    schedule = cls(**read_fields(sub_config, f"{lr_path}.{kind}", fields))

    warmup = getattr(optimization_config, "warmup", None)
    if warmup is not None and getattr(warmup, "type", None) not in (None, ""):
        warmup_path = f"{OPTIMIZATION_PATH}.warmup"
        kind, sub_config = selected(warmup, warmup_path, _WARMUPS)
        cls, fields = _WARMUPS[kind]
        schedule = cls(schedule, **read_fields(sub_config, f"{warmup_path}.{kind}", fields))
    return _legacy_decay(optimization_config, schedule)


def _legacy_decay(optimization_config: Any, schedule: LearningRateSchedule) -> LearningRateSchedule:
    """Wraps ``schedule`` with the optimizer's Keras ``decay`` (applied after warmup, as the
    legacy Keras optimizer decays whatever rate it is given)."""
    optimizer = getattr(optimization_config, "optimizer", None)
    kind = getattr(optimizer, "type", None)
    decay = getattr(getattr(optimizer, kind, None), "decay", 0.0) if kind else 0.0
    return InverseTimeDecay(schedule, decay) if decay else schedule
