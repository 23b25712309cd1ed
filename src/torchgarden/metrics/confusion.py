"""Confusion-count metrics: `Precision`, `Recall` (thresholded) and `MeanIoU` (confusion matrix)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from torchgarden.metrics._shapes import broadcast_weight, divide_no_nan
from torchgarden.metrics.base import Metric
from torchgarden.utils.tensors import match_rank

SampleWeight = torch.Tensor | float | None


class _ThresholdCounts(Metric):
    """Counts true/false positives/negatives of ``y_pred > threshold`` for each threshold."""

    _counts: tuple[str, ...] = ()

    def __init__(self, thresholds: float | Sequence[float], class_id: int | None,
                 name: str | None, dtype: torch.dtype) -> None:
        super().__init__(name, dtype)
        values = [thresholds] if isinstance(thresholds, int | float) else list(thresholds)
        if not values or any(not 0.0 <= t <= 1.0 for t in values):
            raise ValueError(f"{type(self).__name__}: thresholds must be numbers in [0, 1], "
                             f"got {thresholds!r}.")
        self._scalar = isinstance(thresholds, int | float)
        self.class_id = class_id
        self.register_buffer("thresholds", torch.tensor(values, dtype=torch.float32),
                             persistent=False)
        for count in self._counts:
            self.add_weight(count, shape=(len(values),))

    def update_state(self, y_true: torch.Tensor, y_pred: torch.Tensor,
                     sample_weight: SampleWeight = None) -> None:
        """Accumulates counts.

        Args:
            y_true: 0/1 labels (any shape matching ``y_pred``; nonzero means positive).
            y_pred: Probabilities in [0, 1], same shape as ``y_true``.
            sample_weight: Optional weights broadcast to ``y_pred`` (``[N]`` per example).
        """
        y_true, y_pred = match_rank(torch.as_tensor(y_true), torch.as_tensor(y_pred))
        if self.class_id is not None:
            y_true, y_pred = y_true[..., self.class_id], y_pred[..., self.class_id]
        y_pred = y_pred.to(self.thresholds.dtype)
        weight = (torch.ones_like(y_pred) if sample_weight is None
                  else broadcast_weight(y_pred, sample_weight, self.name))
        positive = (y_true != 0).reshape(1, -1)
        weight = weight.reshape(1, -1).to(self.dtype)
        predicted = y_pred.reshape(1, -1) > self.thresholds.view(-1, 1)  # [T, elements]
        masks = {
            "true_positives": predicted & positive,
            "false_positives": predicted & ~positive,
            "false_negatives": ~predicted & positive,
        }
        for count in self._counts:
            getattr(self, count).add_((masks[count] * weight).sum(dim=1))

    def _finish(self, value: torch.Tensor) -> torch.Tensor:
        return value[0] if self._scalar else value


class Precision(_ThresholdCounts):
    """``tp / (tp + fp)`` of ``y_pred > threshold`` (binary or multi-label, Keras semantics).

    Args:
        thresholds: A threshold or a list of them; with a list, `result()` has one value
            per threshold. Defaults to 0.5.
        class_id: Only look at this index of the last axis. Defaults to all elements.
        name: Log key. Defaults to ``"precision"``.
        dtype: State dtype. Defaults to float32.
    """

    _counts = ("true_positives", "false_positives")

    def __init__(self, thresholds: float | Sequence[float] = 0.5, class_id: int | None = None,
                 name: str | None = "precision", dtype: torch.dtype = torch.float32) -> None:
        super().__init__(thresholds, class_id, name, dtype)

    def result(self) -> torch.Tensor:
        tp = self.true_positives
        return self._finish(divide_no_nan(tp, tp + self.false_positives))


class Recall(_ThresholdCounts):
    """``tp / (tp + fn)`` of ``y_pred > threshold`` (binary or multi-label, Keras semantics).

    Args:
        thresholds: A threshold or a list of them; with a list, `result()` has one value
            per threshold. Defaults to 0.5.
        class_id: Only look at this index of the last axis. Defaults to all elements.
        name: Log key. Defaults to ``"recall"``.
        dtype: State dtype. Defaults to float32.
    """

    _counts = ("true_positives", "false_negatives")

    def __init__(self, thresholds: float | Sequence[float] = 0.5, class_id: int | None = None,
                 name: str | None = "recall", dtype: torch.dtype = torch.float32) -> None:
        super().__init__(thresholds, class_id, name, dtype)

    def result(self) -> torch.Tensor:
        tp = self.true_positives
        return self._finish(divide_no_nan(tp, tp + self.false_negatives))


class MeanIoU(Metric):
    """Mean intersection-over-union over the classes present, from a confusion matrix.

    ``y_pred`` is read by its rank relative to ``y_true`` (after squeezing a size-1 axis 1
    from ``y_true``): the same rank means class indices ``[N, ...]``; one more axis means
    scores (logits or probabilities) ``[N, C, ...]`` whose argmax over axis 1 is taken.
    Labels equal to ``ignore_index``, and labels or predictions outside ``[0, num_classes)``,
    are skipped. A class counts toward the mean only if it appears in the labels or the
    predictions. The matrix is float64 so pixel counts stay exact.

    Example:
        >>> m = MeanIoU(num_classes=2)
        >>> m.update_state(torch.tensor([0, 0, 1, 1]), torch.tensor([0, 1, 1, 1]))
        >>> round(float(m.result()), 4)  # (1/2 + 2/3) / 2
        0.5833

    Args:
        num_classes: Number of classes ``C``.
        ignore_index: Label value to skip (e.g. 255 for void pixels). Defaults to None.
        name: Log key. Defaults to ``"mean_iou"``.
        dtype: Dtype of the confusion matrix. Defaults to float64.
    """

    def __init__(self, num_classes: int, ignore_index: int | None = None,
                 name: str | None = "mean_iou", dtype: torch.dtype = torch.float64) -> None:
        if not isinstance(num_classes, int) or isinstance(num_classes, bool) or num_classes < 1:
            raise ValueError(f"MeanIoU: num_classes must be a positive int, got {num_classes!r}.")
        super().__init__(name, dtype)
        self.num_classes = num_classes
        self.ignore_index = ignore_index
        self.total_cm = self.add_weight("total_cm", shape=(num_classes, num_classes))

    def update_state(self, y_true: torch.Tensor, y_pred: torch.Tensor,
                     sample_weight: SampleWeight = None) -> None:
        """Adds a batch to the confusion matrix (rows: labels, columns: predictions).

        Args:
            y_true: Integer labels ``[N, ...]`` (or ``[N, 1, ...]``).
            y_pred: Class indices ``[N, ...]`` or scores ``[N, C, ...]`` (see the class doc).
            sample_weight: Optional weights broadcast to ``y_true`` (``[N]`` per example).
        """
        if y_true.ndim > 1 and y_true.ndim == y_pred.ndim and y_true.shape[1] == 1 \
                and y_pred.shape[1] != 1:
            y_true = y_true.squeeze(1)
        if y_pred.ndim == y_true.ndim + 1:
            y_pred = y_pred.argmax(dim=1)
        elif y_pred.ndim != y_true.ndim:
            raise ValueError(f"MeanIoU: y_pred must be class indices shaped like y_true "
                             f"{tuple(y_true.shape)} or scores [N, C, ...]; got "
                             f"{tuple(y_pred.shape)}.")
        cm = self.total_cm
        labels = y_true.reshape(-1).to(cm.device, torch.long)
        preds = y_pred.reshape(-1).to(cm.device, torch.long)
        valid = (labels >= 0) & (labels < self.num_classes) & (preds >= 0) \
            & (preds < self.num_classes)
        if self.ignore_index is not None:
            valid &= labels != self.ignore_index
        weight = valid.to(cm.dtype)
        if sample_weight is not None:
            weight = weight * broadcast_weight(y_true.to(cm.dtype), sample_weight,
                                               self.name).reshape(-1).to(cm.device)
        # index_add_ instead of bincount: bincount syncs to size its output.
        index = torch.where(valid, labels * self.num_classes + preds, 0)
        cm.view(-1).index_add_(0, index, weight)

    def per_class_iou(self) -> torch.Tensor:
        """IoU of every class, shape ``[num_classes]``; 0 for a class never seen."""
        cm = self.total_cm
        tp = cm.diagonal()
        return divide_no_nan(tp, cm.sum(0) + cm.sum(1) - tp)

    def result(self) -> torch.Tensor:
        cm = self.total_cm
        tp = cm.diagonal()
        present = (cm.sum(0) + cm.sum(1) - tp) != 0
        return divide_no_nan(self.per_class_iou().sum(), present.sum().to(cm.dtype))
