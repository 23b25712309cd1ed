"""Keras-style losses: per-example `call`, sample weighting and a `Reduction`."""

from torchgarden.losses.base import Loss, LossFunctionWrapper, Reduction
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
from torchgarden.losses.lookup import get

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
