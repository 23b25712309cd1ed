"""Callbacks (loop hooks that may stop training) and Orbit-style actions."""

from torchgarden.callbacks.actions import (
    ConditionalAction,
    ExportOnBest,
    NewBestMetric,
    RecoveryAction,
    RecoveryHooks,
    TrainingDivergedError,
)
from torchgarden.callbacks.base import Callback, LambdaCallback, lookup_metric
from torchgarden.callbacks.early_stopping import EarlyStopping

__all__ = [
    "Callback", "LambdaCallback", "EarlyStopping", "ExportOnBest", "ConditionalAction",
    "NewBestMetric", "RecoveryAction", "RecoveryHooks", "TrainingDivergedError", "lookup_metric",
]
