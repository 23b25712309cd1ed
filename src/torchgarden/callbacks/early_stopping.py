"""``EarlyStopping``: stop when a monitored metric has stopped improving (Keras semantics)."""

from __future__ import annotations

import logging
import math
from typing import Any

import torch

from torchgarden.callbacks.base import Callback, lookup_metric
from torchgarden.utils.logs import Logs
from torchgarden.utils.metric_path import has_metric

__all__ = ["EarlyStopping"]

_logger = logging.getLogger("torchgarden")


class EarlyStopping(Callback):
    """Stops training when ``monitor`` has not improved for ``patience`` checks.

    The metric is checked after every evaluation when it is an eval-log key (the usual
    case, e.g. ``"validation_loss"``, ``"coco|AP"``, or a named validation set's or a
    task's ``"digits/accuracy"``), else after every train loop.

    Args:
        monitor: Log key to watch; ``|`` or ``/`` addresses nested logs. Default
            ``"validation_loss"``.
        min_delta: Minimum change that counts as an improvement. Default 0.
        patience: Checks without improvement before stopping. Default 0.
        mode: ``"min"``, ``"max"`` or ``"auto"`` (max when the name contains
            ``acc``/``AP``/``auc``/``iou``/``precision``/``recall``). Default ``"auto"``.
        baseline: Value the metric must beat; stops after ``patience`` checks that do not.
        restore_best_weights: Load the best weights seen when stopping. Default False.
    """

    def __init__(
        self,
        monitor: str = "validation_loss",
        min_delta: float = 0.0,
        patience: int = 0,
        mode: str = "auto",
        baseline: float | None = None,
        restore_best_weights: bool = False,
    ) -> None:
        super().__init__()
        if mode not in ("auto", "min", "max"):
            raise ValueError(f"EarlyStopping mode must be 'auto', 'min' or 'max', got '{mode}'.")
        if patience < 0:
            raise ValueError(f"EarlyStopping patience must be >= 0, got {patience}.")
        if mode == "auto":
            lowered = monitor.lower()
            maximise = any(k in lowered for k in ("acc", "ap", "auc", "iou", "precision", "recall"))
            mode = "max" if maximise else "min"
        self.monitor = monitor
        self.min_delta = abs(min_delta)
        self.patience = patience
        self.mode = mode
        self.baseline = baseline
        self.restore_best_weights = restore_best_weights
        self.wait = 0
        self.best: float = math.inf if mode == "min" else -math.inf
        self.best_step: int | None = None
        self.stopped_step: int | None = None
        self._best_weights: dict[str, torch.Tensor] | None = None

    def _improved(self, value: float, reference: float | None) -> bool:
        if reference is None:  # The first check, without a baseline.
            return True
        if self.mode == "min":
            return value < reference - self.min_delta
        return value > reference + self.min_delta

    def _check(self, step: int, logs: Logs) -> None:
        value = float(lookup_metric(logs, self.monitor))
        if self._improved(value, self.baseline if self.best_step is None else self.best):
            self.best, self.best_step, self.wait = value, step, 0
            if self.restore_best_weights and self.model is not None:
                self._best_weights = {
                    k: v.detach().clone() for k, v in self.model.state_dict().items()
                }
            return
        self.wait += 1
        if self.wait >= max(self.patience, 1) and self.controller is not None:
            self.stopped_step = step
            self.controller.stop_training = True
            _logger.info(
                "early stopping at step %d: '%s' did not improve on %.6g (step %s) for %d "
                "checks.", step, self.monitor, self.best, self.best_step, self.wait,
            )
            if self._best_weights is not None and self.model is not None:
                self.model.load_state_dict(self._best_weights)
                _logger.info("restored the best weights (step %s).", self.best_step)

    def on_eval_end(self, step: int, logs: Logs) -> None:
        if has_metric(logs, self.monitor):
            self._check(step, logs)

    on_train_loop_end = on_eval_end  # A train-log key is checked after every train loop.

    def state_dict(self) -> dict[str, Any]:
        return {
            "wait": self.wait,
            "best": self.best,
            "best_step": -1 if self.best_step is None else self.best_step,
            "best_weights": self._best_weights or {},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.wait = int(state["wait"])
        self.best = float(state["best"])
        self.best_step = None if state["best_step"] < 0 else int(state["best_step"])
        self._best_weights = dict(state["best_weights"]) or None
