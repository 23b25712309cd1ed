"""Optimisation: LR schedules, the optimizer factory, loss scaling and weight EMA.

Model Garden's ``official/modeling/optimization`` on PyTorch, LAMB, LARS and Adafactor
included. Configs become objects
through :func:`build_learning_rate` and :func:`build_optimizer`; everything else takes
built objects.
"""

from torchgarden.optim import model_garden_optimizers  # noqa: F401  (registers lamb, lars, ...)
from torchgarden.optim.clipping import add_gradient_clipping
from torchgarden.optim.ema import ExponentialMovingAverage
from torchgarden.optim.factory import (
    build_optimizer,
    get_learning_rate,
    register_optimizer,
    set_learning_rate,
)
from torchgarden.optim.freezing import FreezeSchedule
from torchgarden.optim.keras_rules import KerasAdam, KerasRMSprop, KerasSGD
from torchgarden.optim.layerwise import LAMB, LARS
from torchgarden.optim.learning_rate import build_learning_rate
from torchgarden.optim.loss_scale import LossScaleOptimizer
from torchgarden.optim.model_garden_optimizers import SGDTorch
from torchgarden.optim.model_garden_schedules import (
    InverseTimeDecay,
    PowerAndLinearDecay,
    PowerDecayWithOffset,
    StepCosineDecayWithOffset,
)
from torchgarden.optim.param_rules import apply_param_rules
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

__all__ = [
    "ConstantSchedule",
    "CosineDecay",
    "ExponentialDecay",
    "ExponentialMovingAverage",
    "FreezeSchedule",
    "InverseTimeDecay",
    "KerasAdam",
    "KerasRMSprop",
    "KerasSGD",
    "LAMB",
    "LARS",
    "LearningRateSchedule",
    "LinearWarmup",
    "LossScaleOptimizer",
    "PiecewiseConstantDecay",
    "PolynomialDecay",
    "PolynomialWarmup",
    "PowerAndLinearDecay",
    "PowerDecay",
    "PowerDecayWithOffset",
    "SGDTorch",
    "StepCosineDecayWithOffset",
    "add_gradient_clipping",
    "apply_param_rules",
    "build_learning_rate",
    "build_optimizer",
    "get_learning_rate",
    "register_optimizer",
    "set_learning_rate",
]
