"""Keras-style losses: per-example `call`, sample weighting and a `Reduction`."""

from torchgarden.losses.base import Loss, LossFunctionWrapper, Reduction, get
from torchgarden.losses.builtins import (
    BinaryCrossentropy,
    CategoricalCrossentropy,
    ContrastiveLoss,
    FocalLoss,
    Huber,
    MeanAbsoluteError,
    MeanSquaredError,
    SparseCategoricalCrossentropy,
)

__all__ = [
    "BinaryCrossentropy",
    "CategoricalCrossentropy",
    "ContrastiveLoss",
    "FocalLoss",
    "Huber",
    "Loss",
    "LossFunctionWrapper",
    "MeanAbsoluteError",
    "MeanSquaredError",
    "Reduction",
    "SparseCategoricalCrossentropy",
    "get",
]
