"""Built-in losses with Keras semantics.

Per-example convention: regression, binary cross-entropy and contrastive losses average
over the last axis when the inputs have two or more axes (``[N, D] -> [N]``) and are
element-wise for ``[N]``. Under the default reduction (``sum_over_batch_size``) every one
of them equals the corresponding ``torch.nn.functional`` loss with ``reduction="mean"``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from torchgarden.losses.base import Loss, Reduction
from torchgarden.utils.tensors import match_rank

EPSILON = 1e-7
"""Clip for probability inputs (``from_logits=False``), as in Keras."""

ReductionArg = Reduction | str | None


def _same_shape(owner: Loss, y_true: torch.Tensor,
                y_pred: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y_true, y_pred = match_rank(y_true, y_pred)
    if y_true.shape != y_pred.shape:
        raise ValueError(f"{type(owner).__name__}: y_true shape {tuple(y_true.shape)} and y_pred "
                         f"shape {tuple(y_pred.shape)} must match.")
    return y_true.to(y_pred.dtype), y_pred


def _per_example(elementwise: torch.Tensor) -> torch.Tensor:
    return elementwise.mean(dim=-1) if elementwise.ndim >= 2 else elementwise


class MeanSquaredError(Loss):
    """``mean((y_true - y_pred) ** 2)`` over the last axis.

    Args:
        reduction: Defaults to ``AUTO`` (``sum_over_batch_size``).
        name: Defaults to ``"mean_squared_error"``.
    """

    def __init__(self, *, reduction: ReductionArg = Reduction.AUTO,
                 name: str | None = "mean_squared_error") -> None:
        super().__init__(reduction=reduction, name=name)

    def call(self, y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
        y_true, y_pred = _same_shape(self, y_true, y_pred)
        return _per_example(torch.square(y_pred - y_true))


class MeanAbsoluteError(Loss):
    """``mean(|y_true - y_pred|)`` over the last axis.

    Args:
        reduction: Defaults to ``AUTO`` (``sum_over_batch_size``).
        name: Defaults to ``"mean_absolute_error"``.
    """

    def __init__(self, *, reduction: ReductionArg = Reduction.AUTO,
                 name: str | None = "mean_absolute_error") -> None:
        super().__init__(reduction=reduction, name=name)

    def call(self, y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
        y_true, y_pred = _same_shape(self, y_true, y_pred)
        return _per_example(torch.abs(y_pred - y_true))


class Huber(Loss):
    """Huber loss: ``0.5 x²`` for ``|x| <= delta``, else ``delta (|x| - 0.5 delta)``.

    Averaged over the last axis; equals ``F.huber_loss(y_pred, y_true, delta=delta)``
    under the default reduction.

    Args:
        delta: Where the loss turns from quadratic to linear. Defaults to 1.0.
        reduction: Defaults to ``AUTO`` (``sum_over_batch_size``).
        name: Defaults to ``"huber_loss"``.
    """

    def __init__(self, delta: float = 1.0, *, reduction: ReductionArg = Reduction.AUTO,
                 name: str | None = "huber_loss") -> None:
        if delta <= 0:
            raise ValueError(f"Huber: delta must be > 0, got {delta!r}.")
        super().__init__(reduction=reduction, name=name)
        self.delta = float(delta)

    def call(self, y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
        y_true, y_pred = _same_shape(self, y_true, y_pred)
        return _per_example(F.huber_loss(y_pred, y_true, reduction="none", delta=self.delta))


def _check_smoothing(owner: str, label_smoothing: float) -> float:
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"{owner}: label_smoothing must be in [0, 1], got {label_smoothing!r}.")
    return float(label_smoothing)


class BinaryCrossentropy(Loss):
    """Binary cross-entropy for 0/1 (or soft) targets, averaged over the last axis.

    Args:
        from_logits: ``y_pred`` holds logits (True) or probabilities (False, clipped to
            ``[1e-7, 1 - 1e-7]``). Defaults to False.
        label_smoothing: Targets become ``y (1 - s) + 0.5 s``. Defaults to 0.0.
        reduction: Defaults to ``AUTO`` (``sum_over_batch_size``).
        name: Defaults to ``"binary_crossentropy"``.
    """

    def __init__(self, from_logits: bool = False, label_smoothing: float = 0.0, *,
                 reduction: ReductionArg = Reduction.AUTO,
                 name: str | None = "binary_crossentropy") -> None:
        super().__init__(reduction=reduction, name=name)
        self.from_logits = from_logits
        self.label_smoothing = _check_smoothing("BinaryCrossentropy", label_smoothing)

    def call(self, y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
        y_true, y_pred = _same_shape(self, y_true, y_pred)
        if self.label_smoothing:
            y_true = y_true * (1.0 - self.label_smoothing) + 0.5 * self.label_smoothing
        if self.from_logits:
            loss = F.binary_cross_entropy_with_logits(y_pred, y_true, reduction="none")
        else:
            p = y_pred.clamp(EPSILON, 1.0 - EPSILON)
            loss = -(y_true * torch.log(p) + (1.0 - y_true) * torch.log1p(-p))
        return _per_example(loss)


class CategoricalCrossentropy(Loss):
    """Cross-entropy against one-hot (or soft) targets along ``axis``.

    Args:
        from_logits: ``y_pred`` holds logits (True) or probabilities (False: normalised to
            sum to 1, then clipped to ``[1e-7, 1 - 1e-7]``). Defaults to False.
        label_smoothing: Targets become ``y (1 - s) + s / C``. Defaults to 0.0.
        axis: Class axis. Defaults to -1 (Keras); use 1 for ``[N, C, H, W]``.
        reduction: Defaults to ``AUTO`` (``sum_over_batch_size``).
        name: Defaults to ``"categorical_crossentropy"``.
    """

    def __init__(self, from_logits: bool = False, label_smoothing: float = 0.0,
                 axis: int = -1, *, reduction: ReductionArg = Reduction.AUTO,
                 name: str | None = "categorical_crossentropy") -> None:
        super().__init__(reduction=reduction, name=name)
        self.from_logits = from_logits
        self.label_smoothing = _check_smoothing("CategoricalCrossentropy", label_smoothing)
        self.axis = axis

    def call(self, y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
        y_true, y_pred = _same_shape(self, y_true, y_pred)
        if self.label_smoothing:
            num_classes = y_pred.shape[self.axis]
            y_true = y_true * (1.0 - self.label_smoothing) + self.label_smoothing / num_classes
        if self.from_logits:
            log_p = F.log_softmax(y_pred, dim=self.axis)
        else:
            p = y_pred / y_pred.sum(dim=self.axis, keepdim=True)
            log_p = torch.log(p.clamp(EPSILON, 1.0 - EPSILON))
        return -(y_true * log_p).sum(dim=self.axis)


class SparseCategoricalCrossentropy(Loss):
    """Cross-entropy against integer labels; class axis 1 (PyTorch layout).

    ``y_pred`` is ``[N, C]`` or dense ``[N, C, d1, ...]``; ``y_true`` is ``[N]`` (or
    ``[N, 1]``) or ``[N, d1, ...]``. The per-example loss has ``y_true``'s shape.

    With ``ignore_index``, positions labelled ``ignore_index`` get loss 0 and are left out
    of the count: ``sum_over_batch_size`` divides by the number of non-ignored positions
    (``F.cross_entropy(..., ignore_index=i)`` with mean reduction, except that an
    all-ignored batch gives 0, not NaN), ``mean`` by the sum of their weights, and ``none``
    returns zeros there.

    Args:
        from_logits: ``y_pred`` holds logits (True; equals ``F.cross_entropy``) or
            probabilities (False: normalised, clipped to ``[1e-7, 1 - 1e-7]``). Defaults to
            False.
        ignore_index: Label value to skip (e.g. 255 for void pixels). Defaults to None.
        label_smoothing: The one-hot target becomes ``y (1 - s) + s / C``, as in
            ``CategoricalCrossentropy`` and ``F.cross_entropy(label_smoothing=s)``.
            Defaults to 0.0.
        reduction: Defaults to ``AUTO`` (``sum_over_batch_size``).
        name: Defaults to ``"sparse_categorical_crossentropy"``.
    """

    def __init__(self, from_logits: bool = False, ignore_index: int | None = None,
                 label_smoothing: float = 0.0, *,
                 reduction: ReductionArg = Reduction.AUTO,
                 name: str | None = "sparse_categorical_crossentropy") -> None:
        super().__init__(reduction=reduction, name=name)
        self.from_logits = from_logits
        self.ignore_index = ignore_index
        self.label_smoothing = _check_smoothing("SparseCategoricalCrossentropy", label_smoothing)

    def _labels(self, y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
        if y_true.ndim == y_pred.ndim and y_true.shape[1] == 1:
            y_true = y_true.squeeze(1)
        if y_true.ndim != y_pred.ndim - 1 or y_true.shape[1:] != y_pred.shape[2:] \
                or y_true.shape[0] != y_pred.shape[0]:
            raise ValueError(f"SparseCategoricalCrossentropy: expected y_pred [N, C, ...] and "
                             f"integer y_true [N, ...]; got y_pred {tuple(y_pred.shape)} and "
                             f"y_true {tuple(y_true.shape)}.")
        return y_true.long()

    def _call_with_mask(self, y_true: torch.Tensor,
                        y_pred: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        labels = self._labels(y_true, y_pred)
        # F.cross_entropy cannot switch ignoring off; -100 is its default sentinel.
        ignore = self.ignore_index if self.ignore_index is not None else -100
        smoothing = self.label_smoothing
        if self.from_logits:
            loss = F.cross_entropy(y_pred, labels, reduction="none", ignore_index=ignore,
                                   label_smoothing=smoothing)
        else:
            p = y_pred / y_pred.sum(dim=1, keepdim=True)
            log_p = torch.log(p.clamp(EPSILON, 1.0 - EPSILON))
            loss = F.nll_loss(log_p, labels, reduction="none", ignore_index=ignore)
            if smoothing:
                # (1 - s) * nll + s * mean over classes of -log p; 0 where ignored.
                uniform = -log_p.mean(dim=1)
                if self.ignore_index is not None:
                    uniform = torch.where(labels == self.ignore_index, 0.0, uniform)
                loss = (1.0 - smoothing) * loss + smoothing * uniform
        mask = labels != self.ignore_index if self.ignore_index is not None else None
        return loss, mask

    def call(self, y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
        return self._call_with_mask(y_true, y_pred)[0]


class FocalLoss(Loss):
    """Sigmoid focal loss on logits (Lin et al., 2017), Model Garden's formulation.

    Element-wise: ``ce = BCE_with_logits(y_pred, y_true)``, ``p_t = sigmoid(y_pred)`` where
    ``y_true == 1`` else ``1 - sigmoid(y_pred)``, ``loss = (1 - p_t) ** gamma * ce``,
    times ``alpha`` on positives and ``1 - alpha`` elsewhere. No axis is averaged, so the
    per-example loss has ``y_pred``'s shape (e.g. ``[N, anchors, classes]``); RetinaNet
    uses ``reduction="sum"`` and divides by the number of positives.

    Args:
        alpha: Weight of positives. Defaults to 0.25.
        gamma: Focusing exponent. Defaults to 1.5, the value of Model Garden's RetinaNet
            config (the paper uses 2.0).
        reduction: Defaults to ``AUTO`` (``sum_over_batch_size``).
        name: Defaults to ``"focal_loss"``.
    """

    def __init__(self, alpha: float = 0.25, gamma: float = 1.5, *,
                 reduction: ReductionArg = Reduction.AUTO,
                 name: str | None = "focal_loss") -> None:
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"FocalLoss: alpha must be in [0, 1], got {alpha!r}.")
        if gamma < 0:
            raise ValueError(f"FocalLoss: gamma must be >= 0, got {gamma!r}.")
        super().__init__(reduction=reduction, name=name)
        self.alpha = float(alpha)
        self.gamma = float(gamma)

    def call(self, y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
        y_true, y_pred = _same_shape(self, y_true, y_pred)
        cross_entropy = F.binary_cross_entropy_with_logits(y_pred, y_true, reduction="none")
        probs = torch.sigmoid(y_pred)
        positive = y_true == 1.0
        probs_gt = torch.where(positive, probs, 1.0 - probs)
        loss = torch.pow(1.0 - probs_gt, self.gamma) * cross_entropy
        return torch.where(positive, self.alpha * loss, (1.0 - self.alpha) * loss)


class ContrastiveLoss(Loss):
    """Contrastive loss for Siamese networks: ``y d² + (1 - y) max(margin - d, 0)²``.

    ``y_true`` is 1 for a similar pair and 0 for a dissimilar one; ``y_pred`` is the
    distance ``d`` between the two embeddings. Averaged over the last axis.

    Args:
        margin: Distance beyond which dissimilar pairs cost nothing. Defaults to 1.0.
        reduction: Defaults to ``AUTO`` (``sum_over_batch_size``).
        name: Defaults to ``"contrastive_loss"``.
    """

    def __init__(self, margin: float = 1.0, *, reduction: ReductionArg = Reduction.AUTO,
                 name: str | None = "contrastive_loss") -> None:
        super().__init__(reduction=reduction, name=name)
        self.margin = float(margin)

    def call(self, y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
        y_true, y_pred = _same_shape(self, y_true, y_pred)
        far = torch.square(torch.clamp(self.margin - y_pred, min=0.0))
        return _per_example(y_true * torch.square(y_pred) + (1.0 - y_true) * far)
