"""Letting `build_metrics` return torchmetrics objects, and reading many metrics at once."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from torchgarden.metrics.base import Metric, snake_case


class TorchMetricsAdapter(Metric):
    """Gives a ``torchmetrics.Metric`` the Keras-style `Metric` interface.

    torchmetrics takes ``update(preds, target)``; this adapter takes
    ``update_state(y_true, y_pred)`` and swaps the order. The wrapped metric is a
    submodule, so ``adapter.to(device)`` moves its state. torchmetrics synchronises
    across processes itself inside ``compute()``, so `sync` has nothing to do.

    Example:
        >>> import torchmetrics
        >>> acc = TorchMetricsAdapter(torchmetrics.Accuracy(task="binary"))
        >>> acc.update_state(torch.tensor([1, 0]), torch.tensor([0.9, 0.8]))
        >>> float(acc.result())
        0.5

    Args:
        metric: The ``torchmetrics.Metric`` (anything with ``update``, ``compute`` and
            ``reset``).
        name: Log key. Defaults to the snake_case class name of ``metric``.
    """

    def __init__(self, metric: Any, name: str | None = None) -> None:
        super().__init__(name if name is not None else snake_case(type(metric).__name__))
        self.metric = metric

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        """Calls ``metric.update(y_pred, y_true)``.

        Raises:
            ValueError: If ``sample_weight`` is given; torchmetrics' ``update`` has no weights.
        """
        if sample_weight is not None:
            raise ValueError(f"TorchMetricsAdapter({self.name}): torchmetrics' update(preds, "
                             "target) takes no sample_weight; drop it or use a torchgarden "
                             "built-in metric such as Mean.")
        self.metric.update(y_pred, y_true)

    def result(self) -> torch.Tensor | dict[str, torch.Tensor]:
        return self.metric.compute()

    def reset_states(self) -> None:
        self.metric.reset()

    def sync(self) -> None:
        """No-op: torchmetrics synchronises its own state in ``compute()``."""


def as_metric(obj: Any) -> Any:
    """Returns ``obj`` as an object with the `Metric` interface.

    Objects that already have ``update_state`` (a `Metric`, a Keras-style metric of your
    own) come back unchanged; torchmetrics objects (detected by ``update`` and ``compute``,
    without importing torchmetrics) are wrapped in `TorchMetricsAdapter`.

    Raises:
        TypeError: For anything else.
    """
    if hasattr(obj, "update_state"):
        return obj
    if hasattr(obj, "compute") and hasattr(obj, "update"):
        return TorchMetricsAdapter(obj)
    raise TypeError(f"as_metric expected a torchgarden Metric, an object with update_state(...) "
                    f"or a torchmetrics.Metric; got {type(obj).__name__}.")


def metric_results(metrics: Iterable[Any]) -> dict[str, torch.Tensor]:
    """Reads every metric into one dict: ``{m.name: m.result()}``.

    A metric whose `result()` is a dict contributes its keys directly (Keras style).
    The values stay on device; converting them to floats is the caller's sync point.

    Raises:
        ValueError: If two metrics produce the same key.
    """
    results: dict[str, torch.Tensor] = {}
    for metric in metrics:
        value = metric.result()
        items = value.items() if isinstance(value, dict) else [(metric.name, value)]
        for key, tensor in items:
            if key in results:
                raise ValueError(f"metric_results: two metrics produce the key {key!r}; "
                                 "give them distinct names.")
            results[key] = tensor
    return results
