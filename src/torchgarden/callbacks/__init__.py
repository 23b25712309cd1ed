"""Callbacks (loop hooks that may stop training) and Orbit-style actions."""

from torchgarden.callbacks.actions import (
    ConditionalAction,
    ExportOnBest,
    NewBestMetric,
    RecoveryAction,
    RecoveryHooks,
    TrainingDivergedError,
)
from torchgarden.callbacks.base import Callback, EarlyStopping, LambdaCallback, lookup_metric

__all__ = [
    "Callback", "LambdaCallback", "EarlyStopping", "ExportOnBest", "ConditionalAction",
    "NewBestMetric", "RecoveryAction", "RecoveryHooks", "TrainingDivergedError", "lookup_metric",
]
