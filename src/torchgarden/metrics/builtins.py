"""Built-in reducing metrics: means, sums, accuracies and regression errors.

All of them accumulate on the state's device without host syncs. Thresholded and
confusion-matrix metrics (`Precision`, `Recall`, `MeanIoU`) live in `confusion.py`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from torchgarden.metrics._shapes import broadcast_weight, divide_no_nan
from torchgarden.metrics.base import Metric
from torchgarden.utils.tensors import match_rank

SampleWeight = torch.Tensor | float | None


class Sum(Metric):
    """Weighted sum of the values seen.

    Args:
        name: Log key. Defaults to ``"sum"``.
        dtype: State dtype. Defaults to float32.
    """

    def __init__(self, name: str | None = "sum", dtype: torch.dtype = torch.float32) -> None:
        super().__init__(name, dtype)
        self.total = self.add_weight("total")

    def update_state(self, values: torch.Tensor, sample_weight: SampleWeight = None) -> None:
        """Adds ``sum(values * sample_weight)``; the weight broadcasts like Keras'."""
        values = torch.as_tensor(values, device=self.total.device).to(self.total.dtype)
        if sample_weight is not None:
            values = values * broadcast_weight(values, sample_weight, self.name)
        self.total += values.sum()

    def result(self) -> torch.Tensor:
        return self.total.clone()


class Mean(Metric):
    """Weighted mean of the values seen: ``sum(w * v) / sum(w)``; 0 before any update.

    Example:
        >>> m = Mean()
        >>> m.update_state(torch.tensor([1.0, 3.0]))
        >>> m.update_state(torch.tensor(5.0), sample_weight=2.0)
        >>> float(m.result())
        3.5

    Args:
        name: Log key. Defaults to ``"mean"``.
        dtype: State dtype. Defaults to float32.
    """

    def __init__(self, name: str | None = "mean", dtype: torch.dtype = torch.float32) -> None:
        super().__init__(name, dtype)
        self.total = self.add_weight("total")
        self.count = self.add_weight("count")

    def update_state(self, values: torch.Tensor, sample_weight: SampleWeight = None) -> None:
        """Accumulates ``values`` (any shape; every element counts once, times its weight).

        Args:
            values: Tensor (or number) of values; detached automatically.
            sample_weight: Optional weights broadcast to ``values`` (``[N]`` or ``[N, 1]``
                weighs every element of example ``n``). Defaults to 1 for every element.
        """
        values = torch.as_tensor(values, device=self.total.device).to(self.total.dtype)
        if sample_weight is None:
            self.total += values.sum()
            self.count += values.numel()  # a Python int: no sync
            return
        weight = broadcast_weight(values, sample_weight, self.name)
        self.total += (values * weight).sum()
        self.count += weight.sum()

    def result(self) -> torch.Tensor:
        return divide_no_nan(self.total, self.count)


class MeanMetricWrapper(Mean):
    """A `Mean` of ``fn(y_true, y_pred)``, the per-element values of a batch.

    Args:
        fn: ``fn(y_true, y_pred, **kwargs) -> Tensor`` of per-element values.
        name: Log key. Defaults to ``fn.__name__``.
        dtype: State dtype. Defaults to float32.
        **kwargs: Extra keyword arguments passed to ``fn``.
    """

    def __init__(self, fn: Callable[..., torch.Tensor], name: str | None = None,
                 dtype: torch.dtype = torch.float32, **kwargs: object) -> None:
        super().__init__(name if name is not None else getattr(fn, "__name__", "mean"), dtype)
        self._fn = fn
        self._fn_kwargs = kwargs

    def update_state(self, y_true: torch.Tensor, y_pred: torch.Tensor,
                     sample_weight: SampleWeight = None) -> None:
        """Accumulates ``fn(y_true, y_pred)``; ``sample_weight`` broadcasts per example."""
        super().update_state(self._fn(y_true, y_pred, **self._fn_kwargs), sample_weight)


def _split_labels(y_true: torch.Tensor, y_pred: torch.Tensor, owner: str) -> torch.Tensor:
    """Brings integer labels to ``y_pred``'s rank minus the class axis (axis 1)."""
    if y_true.ndim == y_pred.ndim and y_true.shape[1] == 1:
        y_true = y_true.squeeze(1)
    if y_true.ndim != y_pred.ndim - 1:
        raise ValueError(f"{owner}: expected integer labels of shape [N, ...] and scores of shape "
                         f"[N, C, ...]; got y_true {tuple(y_true.shape)} and y_pred "
                         f"{tuple(y_pred.shape)}.")
    return y_true


def accuracy(y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
    """1.0 where ``y_true == y_pred`` element-wise, else 0.0."""
    y_true, y_pred = match_rank(torch.as_tensor(y_true), torch.as_tensor(y_pred))
    return (y_true == y_pred.to(y_true.dtype)).float()


def sparse_categorical_accuracy(y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
    """1.0 where ``argmax(y_pred, dim=1) == y_true``; labels ``[N, ...]`` or ``[N, 1]``."""
    y_true = _split_labels(y_true, y_pred, "sparse_categorical_accuracy")
    return (y_pred.argmax(dim=1) == y_true).float()


def categorical_accuracy(y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
    """1.0 where the argmax of one-hot ``y_true`` equals the argmax of ``y_pred`` (axis -1)."""
    return (y_pred.argmax(dim=-1) == y_true.argmax(dim=-1)).float()


def binary_accuracy(y_true: torch.Tensor, y_pred: torch.Tensor,
                    threshold: float = 0.5) -> torch.Tensor:
    """1.0 where ``(y_pred > threshold)`` equals the 0/1 label."""
    y_true, y_pred = match_rank(y_true, y_pred)
    return ((y_pred > threshold) == (y_true > 0.5)).float()


def top_k_accuracy(y_true: torch.Tensor, y_pred: torch.Tensor, k: int = 5) -> torch.Tensor:
    """1.0 where the integer label is among the ``k`` highest scores (class axis 1)."""
    y_true = _split_labels(y_true, y_pred, "top_k_accuracy")
    top = y_pred.topk(min(k, y_pred.shape[1]), dim=1).indices
    return (top == y_true.unsqueeze(1)).any(dim=1).float()


def squared_error(y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
    """Element-wise ``(y_true - y_pred) ** 2``."""
    y_true, y_pred = match_rank(y_true, y_pred)
    return torch.square(y_true - y_pred)


def absolute_error(y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
    """Element-wise ``|y_true - y_pred|``."""
    y_true, y_pred = match_rank(y_true, y_pred)
    return torch.abs(y_true - y_pred)


class Accuracy(MeanMetricWrapper):
    """How often ``y_pred`` equals ``y_true`` exactly (e.g. already-decoded class ids).

    Args:
        name: Log key. Defaults to ``"accuracy"``.
        dtype: State dtype. Defaults to float32.
    """

    def __init__(self, name: str | None = "accuracy", dtype: torch.dtype = torch.float32) -> None:
        super().__init__(accuracy, name, dtype)


class SparseCategoricalAccuracy(MeanMetricWrapper):
    """How often the argmax of the scores equals the integer label.

    ``y_true``: int labels ``[N]`` or ``[N, 1]`` (or ``[N, ...]`` for dense tasks);
    ``y_pred``: logits or probabilities ``[N, C]`` (or ``[N, C, ...]``, class axis 1).

    Args:
        name: Log key. Defaults to ``"sparse_categorical_accuracy"``.
        dtype: State dtype. Defaults to float32.
    """

    def __init__(self, name: str | None = "sparse_categorical_accuracy",
                 dtype: torch.dtype = torch.float32) -> None:
        super().__init__(sparse_categorical_accuracy, name, dtype)


class CategoricalAccuracy(MeanMetricWrapper):
    """How often the argmax of the scores equals the argmax of the one-hot labels (last axis).

    Args:
        name: Log key. Defaults to ``"categorical_accuracy"``.
        dtype: State dtype. Defaults to float32.
    """

    def __init__(self, name: str | None = "categorical_accuracy",
                 dtype: torch.dtype = torch.float32) -> None:
        super().__init__(categorical_accuracy, name, dtype)


class BinaryAccuracy(MeanMetricWrapper):
    """How often ``y_pred > threshold`` matches the 0/1 label.

    Args:
        name: Log key. Defaults to ``"binary_accuracy"``.
        dtype: State dtype. Defaults to float32.
        threshold: Decision threshold on ``y_pred`` (probabilities). Defaults to 0.5.
    """

    def __init__(self, name: str | None = "binary_accuracy", dtype: torch.dtype = torch.float32,
                 threshold: float = 0.5) -> None:
        super().__init__(binary_accuracy, name, dtype, threshold=threshold)
        self.threshold = threshold


class TopKAccuracy(MeanMetricWrapper):
    """How often the integer label is among the top ``k`` scores.

    Args:
        k: Number of top scores to look at (capped at the number of classes). Defaults to 5.
        name: Log key. Defaults to ``"top_{k}_accuracy"`` (Model Garden's key).
        dtype: State dtype. Defaults to float32.
    """

    def __init__(self, k: int = 5, name: str | None = None,
                 dtype: torch.dtype = torch.float32) -> None:
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise ValueError(f"TopKAccuracy: k must be a positive int, got {k!r}.")
        super().__init__(top_k_accuracy, name if name is not None else f"top_{k}_accuracy",
                         dtype, k=k)
        self.k = k


SparseTopKCategoricalAccuracy = TopKAccuracy


class MeanSquaredError(MeanMetricWrapper):
    """Weighted mean of the squared error over all elements.

    With per-example weights this equals Keras' mean over the last axis followed by the
    weighted mean over examples.

    Args:
        name: Log key. Defaults to ``"mean_squared_error"``.
        dtype: State dtype. Defaults to float32.
    """

    def __init__(self, name: str | None = "mean_squared_error",
                 dtype: torch.dtype = torch.float32) -> None:
        super().__init__(squared_error, name, dtype)


class MeanAbsoluteError(MeanMetricWrapper):
    """Weighted mean of the absolute error over all elements.

    Args:
        name: Log key. Defaults to ``"mean_absolute_error"``.
        dtype: State dtype. Defaults to float32.
    """

    def __init__(self, name: str | None = "mean_absolute_error",
                 dtype: torch.dtype = torch.float32) -> None:
        super().__init__(absolute_error, name, dtype)
