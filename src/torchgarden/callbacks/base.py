"""``Callback``: hooks the Controller calls around train loops, evaluations and checkpoints.

Hooks follow one regular grid (Keras): ``on_{train,train_loop,eval}_{begin,end}`` plus
``on_checkpoint_saved`` / ``on_checkpoint_restored`` and ``on_experiment_end``. Each
receives the global step and, where there is one, the host-side logs dict. A callback
stops training by setting ``self.controller.stop_training = True``; the Controller
checks it at the next loop boundary.

A callback with state (counters, best values) implements ``state_dict`` /
``load_state_dict``; ``run_experiment`` puts such callbacks in the checkpoint so a
resumed run continues with the same counters.

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
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["Callback", "LambdaCallback", "lookup_metric"]

Logs = dict[str, Any]


def lookup_metric(logs: Mapping[str, Any], name: str) -> Any:
    """Returns ``logs[name]``, where ``"a|b"`` addresses ``logs["a"]["b"]``.

    Raises:
        KeyError: Naming the missing part and the keys that exist at that level.
    """
    value: Any = logs
    for part in name.split("|"):
        if not isinstance(value, Mapping) or part not in value:
            keys = sorted(value) if isinstance(value, Mapping) else []
            raise KeyError(
                f"metric '{name}' not found in the logs: no key '{part}' (available: "
                f"{', '.join(map(str, keys)) or 'none'})."
            )
        value = value[part]
    return value


class Callback:
    """Base class: override the hooks you need; every hook is a no-op by default."""

    def __init__(self) -> None:
        self.controller: Any = None

    def set_controller(self, controller: Any) -> None:
        """Called once by the Controller that runs this callback."""
        self.controller = controller

    @property
    def model(self) -> Any:
        """The trained ``nn.Module`` (unwrapped), when the controller's trainer has one."""
        runner = None
        if self.controller is not None:
            runner = self.controller.trainer or self.controller.evaluator
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


class LambdaCallback(Callback):
    """A callback from plain functions: ``LambdaCallback(on_eval_end=lambda s, logs: ...)``.

    Args:
        **hooks: Hook name -> callable with that hook's signature.
    """

    _HOOKS = (
        "on_train_begin", "on_train_end", "on_train_loop_begin", "on_train_loop_end",
        "on_eval_begin", "on_eval_end", "on_checkpoint_saved", "on_checkpoint_restored",
        "on_experiment_end",
    )

    def __init__(self, **hooks: Callable[..., Any]) -> None:
        super().__init__()
        for name, fn in hooks.items():
            if name not in self._HOOKS:
                import difflib

                close = difflib.get_close_matches(name, self._HOOKS, n=1)
                hint = f" Did you mean '{close[0]}'?" if close else ""
                raise TypeError(f"LambdaCallback: unknown hook '{name}'.{hint}")
            setattr(self, name, fn)
