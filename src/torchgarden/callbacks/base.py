"""``Callback``: hooks the Controller calls around train loops, evaluations and checkpoints."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torchgarden.utils.logs import Logs
from torchgarden.utils.metric_path import find_metric as lookup_metric
from torchgarden.utils.suggest import did_you_mean

__all__ = ["Callback", "LambdaCallback", "lookup_metric"]

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
        ...         super().__init__()
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
    """A callback from plain functions: ``LambdaCallback(on_eval_end=lambda s, logs: ...)``.

    Args:
        **hooks: Hook name -> callable with that hook's signature.
    """

    def __init__(self, **hooks: Callable[..., Any]) -> None:
        super().__init__()
        for name, fn in hooks.items():
            if name not in _HOOKS:
                hint = did_you_mean(name, _HOOKS)
                raise TypeError(f"LambdaCallback: unknown hook '{name}'.{hint}")
            setattr(self, name, fn)
