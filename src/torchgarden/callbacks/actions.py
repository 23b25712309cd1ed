"""Orbit-style actions: callables run with each loop's raw output dict (REFERENCE §4.6, §11)."""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Callable, Sequence
from typing import Any

from torchgarden.callbacks.base import lookup_metric
from torchgarden.utils.files import atomic_write_text
from torchgarden.utils.logs import Logs

__all__ = ["ConditionalAction", "NewBestMetric", "RecoveryAction"]

_logger = logging.getLogger("torchgarden")


class ConditionalAction:
    """Runs ``action`` (or each of a sequence) only when ``condition(output)`` is truthy.

    Example:
        >>> best = NewBestMetric("accuracy")
        >>> saved = []
        >>> action = ConditionalAction(condition=best, action=lambda out: saved.append(out))
        >>> action({"accuracy": 0.5}); action({"accuracy": 0.4})
        >>> len(saved)
        1
    """

    def __init__(
        self,
        condition: Callable[[Logs], Any],
        action: Callable[[Logs], Any] | Sequence[Callable[[Logs], Any]],
    ) -> None:
        self.condition = condition
        self.actions = list(action) if isinstance(action, (list, tuple)) else [action]

    def __call__(self, output: Logs) -> None:
        if self.condition(output):
            for action in self.actions:
                action(output)


class NewBestMetric:
    """Condition that is true when ``metric`` beats the best value so far (strictly).

    Args:
        metric: Log key (``|`` for nesting) or a function of the output.
        higher_is_better: Direction. Default True.
        filename: Optional JSON file persisting the best value (written atomically), so
            it survives restarts.
        write_metric: False makes this a read-only client of ``filename``.
    """

    def __init__(
        self,
        metric: str | Callable[[Logs], float],
        higher_is_better: bool = True,
        filename: str | None = None,
        write_metric: bool = True,
    ) -> None:
        self.metric = metric
        self.higher_is_better = higher_is_better
        self.filename = filename
        self.write_metric = write_metric
        self.best_value = -math.inf if higher_is_better else math.inf
        if filename and os.path.exists(filename):
            with open(filename, encoding="utf-8") as f:
                self.best_value = float(json.load(f))

    def metric_value(self, output: Logs) -> float:
        value = self.metric(output) if callable(self.metric) else lookup_metric(output, self.metric)
        return float(value)

    def test(self, output: Logs) -> bool:
        """Whether ``output`` is a new best, without recording it."""
        value = self.metric_value(output)
        return value > self.best_value if self.higher_is_better else value < self.best_value

    def commit(self, output: Logs) -> bool:
        """Like ``test``, and records the value when it is a new best."""
        if not self.test(output):
            return False
        self.best_value = self.metric_value(output)
        if self.filename and self.write_metric:
            atomic_write_text(self.filename, json.dumps(self.best_value))
        return True

    __call__ = commit


class RecoveryAction:
    """Rolls back to the latest checkpoint when the training loss blows up (REFERENCE §11).

    Trips on a NaN loss at any step, or on ``loss > loss_upper_bound`` once the global
    step is at least ``recovery_begin_steps``. After more than ``max_trials`` trips it
    raises ``RuntimeError`` with Model Garden's message; ``max_trials=0`` fails on the
    first trip.

    Args:
        checkpoint_manager: Restores the latest checkpoint (or initialises).
        loss_upper_bound: Upper bound of a healthy loss. Default 1e6.
        recovery_begin_steps: First step at which the bound is enforced. Default 0.
        max_trials: Recoveries allowed before failing. Default 0.
        global_step: The shared step counter.
        loss_key: Train-log key of the loss. Default ``"training_loss"``.
    """

    def __init__(
        self,
        *,
        checkpoint_manager: Any,
        loss_upper_bound: float = 1e6,
        recovery_begin_steps: int = 0,
        max_trials: int = 0,
        global_step: Any = None,
        loss_key: str = "training_loss",
    ) -> None:
        self.checkpoint_manager = checkpoint_manager
        self.loss_upper_bound = loss_upper_bound
        self.recovery_begin_steps = recovery_begin_steps
        self.max_trials = max_trials
        self.global_step = global_step
        self.loss_key = loss_key
        self.recover_counter = 0

    def should_recover(self, loss: float) -> bool:
        if math.isnan(loss):
            return True
        step = int(self.global_step) if self.global_step is not None else 0
        return step >= self.recovery_begin_steps and loss > self.loss_upper_bound

    def __call__(self, output: Logs) -> None:
        if self.loss_key not in output:
            return
        loss = float(output[self.loss_key])  # Host sync: once per loop.
        if not self.should_recover(loss):
            return
        self.recover_counter += 1
        if self.recover_counter > self.max_trials:
            if math.isnan(loss):
                raise RuntimeError(
                    f"The loss value is NaN after training loop and it happens "
                    f"{self.recover_counter} times."
                )
            raise RuntimeError(
                f"The loss value is {loss}, which is larger than the bound "
                f"{self.loss_upper_bound}, happens {self.recover_counter} times."
            )
        step = int(self.global_step) if self.global_step is not None else -1
        path = self.checkpoint_manager.restore_or_initialize()
        _logger.warning(
            "recovering from a loss blow-up (loss=%s at step %d, trial %d of %d): restored %s.",
            loss, step, self.recover_counter, self.max_trials, path or "the initial weights",
        )
