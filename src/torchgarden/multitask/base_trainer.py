"""``MultiTaskBaseTrainer``: joint multi-task training — every task, every step.

Model Garden's ``official/modeling/multitask/base_trainer.py``. A step reads one batch of
each task and takes one optimizer step on ``sum(task_weight * task loss)``
(``MultiTask.joint_train_step``). It is a ``Trainer``: the Controller, checkpoints,
preemption, blow-up recovery, the learning-rate schedule and the EMA work as in a
single-task run. Its checkpoint also holds every task's data position and open
averaging window.

Train logs: ``{task name: {"training_loss": ..., metrics...}, "training_loss": weighted
sum, "learning_rate": ...}``; the per-task dicts become ``train/<task>/`` in TensorBoard.

Example:
    >>> trainer = MultiTaskBaseTrainer(
    ...     multi_task=multi_task, multi_task_model=model,
    ...     optimizer=torch.optim.Adam(model.parameters(), 1e-3),
    ...     train_data={n: t.build_inputs(t.task_config.train_data)
    ...                 for n, t in multi_task.tasks.items()},
    ...     train_metrics={n: t.build_metrics() for n, t in multi_task.tasks.items()})
    >>> logs = trainer.train(100)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from torch import nn

from torchgarden.core.evaluator import adapt_metrics, collect_logs
from torchgarden.core.state import LossMean, TrainWindow
from torchgarden.core.trainer import Trainer
from torchgarden.data import DataIterator
from torchgarden.multitask.base_model import MultiTaskBaseModel
from torchgarden.multitask.multitask import MultiTask
from torchgarden.optim import ExponentialMovingAverage, set_learning_rate
from torchgarden.runtime import RuntimeContext, StepPlan
from torchgarden.utils.logs import Logs

__all__ = ["MultiTaskBaseTrainer", "TaskIterators"]


class TaskIterators:
    """Each task's train ``DataIterator`` as one checkpoint item (every data position).

    ``next()`` returns ``{task name: next batch}`` (a joint step's inputs).

    Args:
        iterators: The iterators by task name.
    """

    def __init__(self, iterators: Mapping[str, DataIterator]) -> None:
        self.iterators = dict(iterators)

    def __iter__(self) -> TaskIterators:
        return self

    @property
    def wait_seconds(self) -> float:
        """Seconds every task's steps have waited for batches (``DataIterator``'s clock)."""
        return sum(iterator.wait_seconds for iterator in self.iterators.values())

    def __next__(self) -> dict[str, Any]:
        return {name: next(iterator) for name, iterator in self.iterators.items()}

    def close(self) -> None:
        """Shuts every task's loader workers down (``DataIterator.close``)."""
        for iterator in self.iterators.values():
            iterator.close()

    def state_dict(self) -> dict[str, Any]:
        return {name: iterator.state_dict() for name, iterator in self.iterators.items()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        missing = sorted(set(self.iterators) - set(state))
        if missing:
            raise KeyError(f"the checkpoint has no data position for tasks {missing}; it "
                           f"holds {sorted(state)}.")
        for name, iterator in self.iterators.items():
            iterator.load_state_dict(state[name])


class _TaskWindows:
    """Every task's open averaging window (loss meter + train metrics) as one item."""

    def __init__(self, windows: Mapping[str, TrainWindow]) -> None:
        self._windows = dict(windows)

    def state_dict(self) -> dict[str, Any]:
        return {name: window.state_dict() for name, window in self._windows.items()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for name, window in self._windows.items():
            if name in state:
                window.load_state_dict(state[name])


class MultiTaskBaseTrainer(Trainer):
    """Trains every task of ``multi_task`` at every step (the joint trainer).

    Args:
        multi_task: The tasks, with their weights.
        multi_task_model: The ``MultiTaskBaseModel`` (what checkpoints and EMA hold).
        optimizer: The optimizer over its parameters; None to build a trainer that only
            restores checkpoints (evaluation jobs).
        train_data: Each task's iterable of train batches, by task name.
        train_metrics: Each task's train metrics, by task name.
        lr_schedule: ``step -> learning rate``, as for ``Trainer``.
        ema: Weight averages of the whole model.
        forward_model: The model wrapped for DDP (one forward per step goes through it).
        checkpoint_items: Extra checkpoint items.
        plan: How steps run (``runtime.StepPlan``: a loss check after every step, the
            recovery replay); one step per call.
        runtime: The process' device and distribution strategy.
    """

    def __init__(
        self,
        *,
        multi_task: MultiTask,
        multi_task_model: nn.Module,
        optimizer: Any = None,
        train_data: Mapping[str, Iterable[Any]] | None = None,
        train_metrics: Mapping[str, Sequence[Any]] | None = None,
        lr_schedule: Callable[[int], float] | None = None,
        ema: ExponentialMovingAverage | None = None,
        forward_model: nn.Module | None = None,
        checkpoint_items: Mapping[str, Any] | None = None,
        plan: StepPlan | None = None,
        runtime: RuntimeContext | None = None,
    ) -> None:
        if not isinstance(multi_task_model, MultiTaskBaseModel):
            raise TypeError(f"multi_task_model must be a MultiTaskBaseModel, got "
                            f"{type(multi_task_model).__name__}; wrap the sub-models: "
                            "MultiTaskBaseModel({task name: module}).")
        super().__init__(
            task=multi_task, model=multi_task_model, optimizer=optimizer, lr_schedule=lr_schedule,
            ema=ema, forward_model=forward_model, checkpoint_items=checkpoint_items,
            plan=plan, runtime=runtime,
        )
        names = list(multi_task.tasks)
        _check_names("multi_task_model.sub_tasks", multi_task_model.sub_tasks, names)
        device = self._runtime.device
        self._multi_task = multi_task
        self._tasks = multi_task.tasks
        metrics = dict(train_metrics or {})
        self._task_metrics = {n: adapt_metrics(metrics.get(n, ()), device) for n in names}
        self._task_losses = {n: LossMean("training_loss", device) for n in names}
        self._train_dataset = train_data
        if train_data is not None:
            _check_names("train_data", train_data, names)
            self._train_iterator = TaskIterators(
                {n: DataIterator(train_data[n], repeat=True) for n in names})

    @property
    def multi_task(self) -> MultiTask:
        return self._multi_task

    @property
    def multi_task_model(self) -> nn.Module:
        return self._raw_model

    @property
    def training_metrics(self) -> dict[str, list[Any]]:
        """Each task's train metrics, by task name (Model Garden's name)."""
        return {name: list(metrics) for name, metrics in self._task_metrics.items()}

    @property
    def training_losses(self) -> dict[str, LossMean]:
        """Each task's loss meter, and ``total_loss`` (Model Garden's name)."""
        return {**self._task_losses, "total_loss": self._train_loss}

    def checkpoint_items(self) -> dict[str, Any]:
        """The ``Trainer``'s items (``train_iterator`` holds every task's data position)
        plus every task's open averaging window."""
        items = super().checkpoint_items()
        if self._train_iterator is not None:
            items["task_windows"] = _TaskWindows({
                name: TrainWindow(self._task_losses[name], self._task_metrics[name])
                for name in self._task_losses})
        return items

    def train_step(self, iterator: Iterator[Any]) -> None:
        """One joint step: a batch of every task, one update on the weighted loss sum."""
        step = self._global_step.value
        if self._lr_varies:
            set_learning_rate(self._optimizer, self._lr_schedule(step))  # type: ignore[misc]
        logs = self._multi_task.joint_train_step(
            self.next_train_inputs(iterator), multi_task_model=self._raw_model,
            optimizer=self._optimizer, task_metrics=self._task_metrics,
            forward_model=self._model,
        )
        for name, meter in self._task_losses.items():
            meter.update_state(logs[name])
        self._finish_step(step, logs["total_loss"])

    def _finish_step(self, step: int, loss: Any) -> None:
        """The loss meter, the EMA and the step counter after a step's update."""
        self._train_loss.update_state(loss)
        self._last_loss = loss
        if self._ema is not None:
            self._ema.update(step + 1)
        self._global_step.value = step + 1

    def train_loop_end(self) -> Logs:
        """The ``Trainer``'s logs (``training_loss`` of every step, ``learning_rate``)
        and, under each task's name, that task's window-averaged loss and metrics (tasks
        not trained in the window are left out)."""
        reset = not self._window_open
        logs = super().train_loop_end()
        for name, meter in self._task_losses.items():
            metrics = self._task_metrics[name]
            if meter.count == 0:  # Same on every rank: ranks draw the same tasks.
                for metric in metrics:
                    metric.reset_states()
                continue
            logs[name] = collect_logs(metrics, meter, reset=reset, always_loss=True)
        return logs


def _check_names(what: str, given: Mapping[str, Any], names: list[str]) -> None:
    if sorted(given) != sorted(names):
        raise ValueError(f"{what} has entries for {sorted(given)}, but the tasks are {names}.")
