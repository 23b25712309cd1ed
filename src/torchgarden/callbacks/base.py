"""``Callback``: hooks the Controller calls around train loops, evaluations and checkpoints;
Keras' ``LambdaCallback`` and ``EarlyStopping``."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

from torchgarden.utils.logs import Logs
from torchgarden.utils.metric_path import find_metric as lookup_metric
from torchgarden.utils.metric_path import has_metric
from torchgarden.utils.suggest import did_you_mean

__all__ = ["Callback", "EarlyStopping", "LambdaCallback", "lookup_metric"]

_logger = logging.getLogger("torchgarden")

# Keras hooks the step-based Controller never calls, and what to write instead.
_EVERY_LOOP = " (runs every trainer.steps_per_loop steps)"
_KERAS_ONLY_HOOKS = {
    "on_epoch_begin": "on_train_loop_begin(self, step)",
    "on_epoch_end": "on_eval_end(self, step, logs) for validation logs, or "
                    "on_train_loop_end(self, step, logs) for train logs",
    "on_batch_begin": "on_train_loop_begin(self, step)" + _EVERY_LOOP,
    "on_batch_end": "on_train_loop_end(self, step, logs)" + _EVERY_LOOP,
    "on_train_batch_begin": "on_train_loop_begin(self, step)" + _EVERY_LOOP,
    "on_train_batch_end": "on_train_loop_end(self, step, logs)" + _EVERY_LOOP,
    "on_test_begin": "on_eval_begin(self, step)",
    "on_test_end": "on_eval_end(self, step, logs)",
    "on_test_batch_begin": "on_eval_begin(self, step)",
    "on_test_batch_end": "on_eval_end(self, step, logs)",
}


class Callback:
    """Base class: override the hooks you need; every hook is a no-op by default.

    Hooks follow one regular grid (Keras): ``on_{train,train_loop,eval}_{begin,end}`` plus
    ``on_checkpoint_saved`` / ``on_checkpoint_restored`` and ``on_experiment_end``. Each
    receives the global step and, where there is one, the host-side logs dict. A callback
    stops training by setting ``self.controller.stop_training = True`` (or, as in Keras,
    ``self.model.stop_training = True``); the Controller checks it at the next loop
    boundary. A callback with state implements ``state_dict`` / ``load_state_dict``;
    ``run_experiment`` puts it in the checkpoint so a resumed run keeps its counters.

    Example:
        >>> class DetectOverfitting(Callback):
        ...     def __init__(self, threshold: float = 1.5):
        ...         self.threshold, self.train_loss = threshold, None
        ...     def on_train_loop_end(self, step, logs):
        ...         self.train_loss = logs["training_loss"]
        ...     def on_eval_end(self, step, logs):
        ...         if logs["validation_loss"] / self.train_loss > self.threshold:
        ...             self.controller.stop_training = True

    Raises:
        TypeError: At class definition, when a subclass defines a Keras epoch or batch
            hook such as ``on_epoch_end`` (the loop is counted in steps); the message
            names the torchgarden hook to use.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, replacement in _KERAS_ONLY_HOOKS.items():
            if name in cls.__dict__:
                raise TypeError(
                    f"{cls.__name__}.{name} is a Keras hook that torchgarden never calls: "
                    f"training is counted in steps, not epochs or batches. Define "
                    f"{replacement} instead (logs keys: 'training_loss', 'validation_loss', "
                    "metric names)."
                )

    controller: Any = None  # The Controller that runs this callback (set_controller).

    def set_controller(self, controller: Any) -> None:
        """Called once by the Controller that runs this callback."""
        self.controller = controller

    @property
    def model(self) -> Any:
        """The trained ``nn.Module`` (unwrapped), when the controller's trainer has one."""
        controller = self.controller
        runner = (controller.trainer or controller.evaluator) if controller is not None else None
        return getattr(runner, "unwrapped_model", None)

    def on_train_begin(self, step: int) -> None:
        """Before the first loop of a ``Controller.train`` call."""

    def on_train_end(self, step: int) -> None:
        """After the last loop of a ``Controller.train`` call."""

    def on_train_loop_begin(self, step: int) -> None:
        """Before each ``trainer.train(steps_per_loop)``."""

    def on_train_loop_end(self, step: int, logs: Logs) -> None:
        """After each train loop, with its window-averaged logs."""

    def on_eval_begin(self, step: int) -> None:
        """Before each evaluation."""

    def on_eval_end(self, step: int, logs: Logs) -> None:
        """After each evaluation, with its logs."""

    def on_checkpoint_saved(self, step: int, path: str) -> None:
        """After a checkpoint is durable on disk."""

    def on_checkpoint_restored(self, step: int, path: str) -> None:
        """After a checkpoint was restored."""

    def on_experiment_end(self, eval_logs: Logs) -> None:
        """Once, when ``run_experiment`` returns."""


_HOOKS = tuple(name for name in vars(Callback) if name.startswith("on_"))


class LambdaCallback(Callback):
    """A callback from plain functions, each with its hook's signature:
    ``LambdaCallback(on_eval_end=lambda step, logs: ...)``."""

    def __init__(self, **hooks: Callable[..., Any]) -> None:
        for name, fn in hooks.items():
            if name not in _HOOKS:
                hint = did_you_mean(name, _HOOKS)
                raise TypeError(f"LambdaCallback: unknown hook '{name}'.{hint}")
            setattr(self, name, fn)


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
        if mode not in ("auto", "min", "max"):
            raise ValueError(f"EarlyStopping mode must be 'auto', 'min' or 'max', got '{mode}'.")
        if patience < 0:
            raise ValueError(f"EarlyStopping patience must be >= 0, got {patience}.")
        if mode == "auto":
            maximised = ("acc", "ap", "auc", "iou", "precision", "recall")
            mode = "max" if any(k in monitor.lower() for k in maximised) else "min"
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
        self._best_weights: dict[str, Any] | None = None

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
                state = self.model.state_dict()
                self._best_weights = {k: v.detach().clone() for k, v in state.items()}
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
