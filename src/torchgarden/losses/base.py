"""`Loss`: Keras-style losses (per-example ``call`` + weighting + reduction) for PyTorch."""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from typing import Any

import torch

from torchgarden.utils.suggest import did_you_mean
from torchgarden.utils.tensors import match_rank


def _snake_case(name: str) -> str:
    name = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()


class Reduction(str, enum.Enum):
    """How `Loss.__call__` turns weighted per-example losses ``l * w`` into the result.

    * ``NONE``: no reduction; the weighted per-example tensor.
    * ``SUM``: ``sum(l * w)``.
    * ``SUM_OVER_BATCH_SIZE``: ``sum(l * w) / number of elements of l`` (Keras' default;
      elements a loss masks out, such as ignored pixels, are not counted).
    * ``MEAN``: weighted mean, ``sum(l * w) / sum(w)`` with ``w`` broadcast to ``l``
      (equals ``SUM_OVER_BATCH_SIZE`` when no ``sample_weight`` is given).
    * ``AUTO``: ``SUM_OVER_BATCH_SIZE``.

    A zero denominator gives 0, not NaN.
    """

    NONE = "none"
    SUM = "sum"
    SUM_OVER_BATCH_SIZE = "sum_over_batch_size"
    MEAN = "mean"
    AUTO = "auto"

    @classmethod
    def validate(cls, value: Reduction | str | None) -> Reduction:
        """Returns ``value`` as a `Reduction` (None means ``NONE``, as in Keras 3).

        Raises:
            ValueError: For an unknown string, naming the choices and the closest one.
        """
        if value is None:
            return cls.NONE
        if isinstance(value, cls):
            return value
        try:
            return cls(str(value).lower())
        except ValueError:
            choices = [r.value for r in cls]
            hint = did_you_mean(value, choices, cutoff=0.0, style="clause")
            raise ValueError(f"reduction must be one of {choices}, got {value!r}{hint}") from None


def _as_float32(x: torch.Tensor) -> torch.Tensor:
    if x.is_floating_point() and x.dtype not in (torch.float32, torch.float64):
        return x.float()
    return x


class Loss:
    """Base class: subclasses compute a per-example loss in `call`; `__call__` reduces it.

    ``loss(y_true, y_pred, sample_weight=None)`` casts half-precision inputs to float32,
    runs `call` with autocast disabled, multiplies by ``sample_weight`` (broadcast like
    Keras: a ``[N]`` or ``[N, 1]`` weight applies to every element of example ``n``) and
    applies the `Reduction`.

    Example:
        >>> class ScaledMSE(Loss):
        ...     def __init__(self, scale=2.0, *, reduction=Reduction.AUTO, name=None):
        ...         super().__init__(reduction=reduction, name=name)
        ...         self.scale = scale
        ...     def call(self, y_true, y_pred):
        ...         return self.scale * torch.square(y_true - y_pred).mean(dim=-1)
        >>> float(ScaledMSE()(torch.zeros(2, 3), torch.ones(2, 3)))
        2.0

    Args:
        reduction: A `Reduction` or its string value. Defaults to ``AUTO``
            (``sum_over_batch_size``).
        name: Name used in logs. Defaults to the snake_case class name.

    Raises:
        ValueError: For an unknown ``reduction``.
    """

    def __init__(self, reduction: Reduction | str | None = Reduction.AUTO,
                 name: str | None = None) -> None:
        self.reduction = Reduction.validate(reduction)
        self.name = name if name is not None else _snake_case(type(self).__name__)

    def call(self, y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
        """Returns the unreduced loss, one value per example (or element)."""
        raise NotImplementedError(f"{type(self).__name__} must implement call(y_true, y_pred).")

    def _call_with_mask(self, y_true: torch.Tensor,
                        y_pred: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`call` plus an optional 0/1 mask of the elements that count (default: all)."""
        return self.call(y_true, y_pred), None

    def __call__(self, y_true: torch.Tensor, y_pred: torch.Tensor,
                 sample_weight: torch.Tensor | float | None = None) -> torch.Tensor:
        """Computes the weighted, reduced loss in float32.

        Args:
            y_true: Targets.
            y_pred: Predictions (any float dtype; half precision is upcast).
            sample_weight: Optional weights broadcast to the per-example loss.

        Returns:
            A scalar tensor, or the weighted per-example tensor for ``Reduction.NONE``.
        """
        y_pred = _as_float32(torch.as_tensor(y_pred))
        y_true = _as_float32(torch.as_tensor(y_true, device=y_pred.device))
        device_type = y_pred.device.type
        if torch.is_autocast_enabled(device_type):
            with torch.autocast(device_type=device_type, enabled=False):
                losses, mask = self._call_with_mask(y_true, y_pred)
        else:
            losses, mask = self._call_with_mask(y_true, y_pred)
        losses = _as_float32(losses)
        return self._weight_and_reduce(losses, sample_weight, mask)

    def _weight_and_reduce(self, losses: torch.Tensor, sample_weight: Any,
                           mask: torch.Tensor | None) -> torch.Tensor:
        weight = None
        if sample_weight is not None:
            weight = _broadcast(torch.as_tensor(sample_weight, dtype=losses.dtype,
                                                device=losses.device), losses, self.name)
        if mask is not None:
            mask = mask.to(losses.dtype)
            weight = mask if weight is None else weight * mask
        if weight is not None:
            losses = losses * weight
        reduction = self.reduction
        if reduction is Reduction.NONE:
            return losses
        total = losses.sum()
        if reduction is Reduction.SUM:
            return total
        if reduction is Reduction.MEAN and weight is not None:
            denominator = weight.expand_as(losses).sum()
        elif mask is not None:
            denominator = mask.expand_as(losses).sum()
        else:
            return total / max(losses.numel(), 1)  # a Python count: no sync
        nonzero = denominator != 0
        return torch.where(nonzero, total / torch.where(nonzero, denominator, 1), 0.0)

    def get_config(self) -> dict[str, Any]:
        """Keras-style config: the reduction and the name."""
        return {"reduction": self.reduction.value, "name": self.name}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(reduction={self.reduction.value!r}, name={self.name!r})"


def _broadcast(weight: torch.Tensor, losses: torch.Tensor, owner: str) -> torch.Tensor:
    if weight.ndim == losses.ndim + 1 and weight.shape[-1] == 1:
        weight = weight.squeeze(-1)
    while weight.ndim < losses.ndim:
        weight = weight.unsqueeze(-1)
    # A plain shape check: torch.broadcast_shapes imports sympy (~2.7 s) on first use.
    broadcastable = all(
        w == 1 or w == n for w, n in zip(reversed(weight.shape), reversed(losses.shape))
    )
    if not broadcastable or weight.ndim > losses.ndim:
        raise ValueError(f"{owner}: sample_weight of shape {tuple(weight.shape)} cannot be "
                         f"broadcast to the per-example loss of shape {tuple(losses.shape)}."
                         ) from None
    return weight


class LossFunctionWrapper(Loss):
    """Turns ``fn(y_true, y_pred, **kwargs) -> per-example loss`` into a `Loss`.

    ``y_true`` and ``y_pred`` of shapes ``[N]`` and ``[N, 1]`` are brought to the same
    rank before ``fn`` sees them.

    Example:
        >>> def my_huber_loss(threshold):
        ...     def loss(y_true, y_pred):
        ...         error = y_true - y_pred
        ...         small = torch.abs(error) <= threshold
        ...         return torch.where(small, error ** 2 / 2,
        ...                            threshold * (torch.abs(error) - threshold / 2))
        ...     return loss
        >>> loss = LossFunctionWrapper(my_huber_loss(1.2))
        >>> float(loss(torch.tensor([0.0]), torch.tensor([1.0])))
        0.5

    Args:
        fn: The per-example loss function.
        reduction: A `Reduction`. Defaults to ``AUTO``.
        name: Name. Defaults to ``fn.__name__``.
        **kwargs: Extra keyword arguments passed to ``fn``.
    """

    def __init__(self, fn: Callable[..., torch.Tensor],
                 reduction: Reduction | str | None = Reduction.AUTO,
                 name: str | None = None, **kwargs: Any) -> None:
        super().__init__(reduction=reduction,
                         name=name if name is not None else getattr(fn, "__name__", None))
        self.fn = fn
        self.fn_kwargs = kwargs

    def call(self, y_true: torch.Tensor, y_pred: torch.Tensor) -> torch.Tensor:
        y_true, y_pred = match_rank(y_true, y_pred)
        return self.fn(y_true, y_pred, **self.fn_kwargs)
