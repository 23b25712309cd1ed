"""`losses.get`: a `Loss` from a name, a `Loss` class or instance, or a plain function."""

from __future__ import annotations

from collections.abc import Callable

import torch

from torchgarden.losses.base import Loss, LossFunctionWrapper
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
from torchgarden.utils.suggest import did_you_mean

__all__ = ["LOSSES_BY_NAME", "get"]

LOSSES_BY_NAME: dict[str, Callable[[], Loss]] = {
    "mse": MeanSquaredError,
    "mean_squared_error": MeanSquaredError,
    "meansquarederror": MeanSquaredError,
    "mae": MeanAbsoluteError,
    "mean_absolute_error": MeanAbsoluteError,
    "meanabsoluteerror": MeanAbsoluteError,
    "huber": Huber,
    "huber_loss": Huber,
    "binary_crossentropy": BinaryCrossentropy,
    "binarycrossentropy": BinaryCrossentropy,
    "bce": BinaryCrossentropy,
    "categorical_crossentropy": CategoricalCrossentropy,
    "categoricalcrossentropy": CategoricalCrossentropy,
    "sparse_categorical_crossentropy": SparseCategoricalCrossentropy,
    "sparsecategoricalcrossentropy": SparseCategoricalCrossentropy,
    "focal": FocalLoss,
    "focal_loss": FocalLoss,
    "focalloss": FocalLoss,
    "contrastive": ContrastiveLoss,
    "contrastive_loss": ContrastiveLoss,
    "contrastiveloss": ContrastiveLoss,
}
"""Names accepted by `losses.get` (lower-cased; class names without underscores too)."""


def get(identifier: Loss | str | Callable[..., torch.Tensor] | type) -> Loss:
    """Returns a `Loss` for a name, a `Loss` (class or instance) or a plain function.

    Names (case-insensitive): ``mse``/``mean_squared_error``, ``mae``/``mean_absolute_error``,
    ``huber``, ``binary_crossentropy``/``bce``, ``categorical_crossentropy``,
    ``sparse_categorical_crossentropy``, ``focal``/``focal_loss``, ``contrastive``, or a
    built-in class name such as ``"Huber"``; each is built with its defaults. A function
    ``fn(y_true, y_pred) -> per-example loss`` (e.g. a closure returned by
    ``my_huber_loss(threshold)``) is wrapped in `LossFunctionWrapper`.

    Raises:
        ValueError: For an unknown name, naming the closest valid one.
        TypeError: For anything that is neither a string nor callable.
    """
    if isinstance(identifier, Loss):
        return identifier
    if isinstance(identifier, type) and issubclass(identifier, Loss):
        return identifier()
    if isinstance(identifier, str):
        table = LOSSES_BY_NAME
        key = identifier.lower()
        if key not in table:
            hint = did_you_mean(key, sorted(table), cutoff=0.0, style="clause")
            raise ValueError(f"Unknown loss {identifier!r}{hint} Known: {sorted(table)}.")
        return table[key]()
    if callable(identifier):
        return LossFunctionWrapper(identifier)
    raise TypeError(f"losses.get expected a Loss, a loss name or a function "
                    f"fn(y_true, y_pred); got {type(identifier).__name__}.")
