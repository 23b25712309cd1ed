"""Streaming metrics (device tensors), host-side evaluators and the torchmetrics adapter."""

from torchgarden.metrics.adapters import TorchMetricsAdapter, as_metric, metric_results
from torchgarden.metrics.base import Metric
from torchgarden.metrics.builtins import (
    Accuracy,
    BinaryAccuracy,
    CategoricalAccuracy,
    Mean,
    MeanAbsoluteError,
    MeanMetricWrapper,
    MeanSquaredError,
    SparseCategoricalAccuracy,
    SparseTopKCategoricalAccuracy,
    Sum,
    TopKAccuracy,
)
from torchgarden.metrics.coco import COCOEvaluator
from torchgarden.metrics.confusion import MeanIoU, Precision, Recall
from torchgarden.metrics.evaluator import Evaluator

__all__ = [
    "Accuracy",
    "BinaryAccuracy",
    "COCOEvaluator",
    "CategoricalAccuracy",
    "Evaluator",
    "Mean",
    "MeanAbsoluteError",
    "MeanIoU",
    "MeanMetricWrapper",
    "MeanSquaredError",
    "Metric",
    "Precision",
    "Recall",
    "SparseCategoricalAccuracy",
    "SparseTopKCategoricalAccuracy",
    "Sum",
    "TopKAccuracy",
    "TorchMetricsAdapter",
    "as_metric",
    "metric_results",
]
