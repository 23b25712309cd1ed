"""`Evaluator`: a host-side (Python) metric such as COCO detection AP."""

from __future__ import annotations

import abc
from typing import Any

from torchgarden.metrics.base import snake_case


class Evaluator(abc.ABC):
    """A metric computed in Python on the host, fed whole batches of outputs.

    Unlike `Metric`, whose state is device tensors updated inside the step, an evaluator
    keeps NumPy arrays (or anything) on the host and does its work in `result()`.
    It plugs into a task through the aggregate/reduce flow, exactly like Model Garden:

    1. ``build_metrics(training=False)`` creates it and stores it on the task
       (``self.coco_metric = COCOEvaluator(...)``).
    2. ``validation_step`` puts the raw outputs in its logs, e.g.
       ``logs["coco_metric"] = (groundtruths, predictions)``.
    3. After every eval step the trainer calls ``state = task.aggregate_logs(state, logs)``
       on the host; the task calls ``reset_states()`` when ``state`` is None (first step)
       and then ``update_state(groundtruths, predictions)``, and returns a truthy state.
    4. Once per evaluation, if the state is truthy, ``task.reduce_aggregated_logs(state)``
       returns ``evaluator.result()``, which computes the numbers and resets.

    Subclasses implement `update_state`, `result` and `reset_states`; `reset_state`
    (the Keras 3 spelling) follows whichever of the two spellings is overridden.

    Args:
        name: Log key. Defaults to the snake_case class name.
    """

    name: str

    def __init__(self, name: str | None = None) -> None:
        self.name = name if name is not None else snake_case(type(self).__name__)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "reset_state" in cls.__dict__ and "reset_states" not in cls.__dict__:
            cls.reset_states = cls.__dict__["reset_state"]
        elif "reset_states" in cls.__dict__ and "reset_state" not in cls.__dict__:
            cls.reset_state = cls.__dict__["reset_states"]

    @abc.abstractmethod
    def update_state(self, groundtruths: Any, predictions: Any) -> None:
        """Accumulates one batch of ground truths and predictions (host side)."""

    @abc.abstractmethod
    def result(self) -> dict[str, float]:
        """Computes the metrics from everything accumulated, as ``{name: float}``."""

    @abc.abstractmethod
    def reset_states(self) -> None:
        """Forgets everything accumulated."""

    def reset_state(self) -> None:
        """Keras 3 spelling of `reset_states`."""
        self.reset_states()
