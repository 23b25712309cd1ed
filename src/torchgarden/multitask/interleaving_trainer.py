"""``MultiTaskInterleavingTrainer``: one task per step, chosen by a seeded task sampler.

Model Garden's ``official/modeling/multitask/interleaving_trainer.py``. A step draws a
task from the ``TaskSampler``, reads that task's next batch and runs that task's own
``train_step`` on its sub-model, so any single-task ``Task`` trains unchanged. The
sampler's generator, every task's data position and per-task step counts are in the
checkpoint: a resumed run draws the same tasks and batches as an uninterrupted one.
Under DDP every rank draws the same task (same seed, same state), and the sub-model is
called through the DDP-wrapped multi-task model, so gradients are all-reduced as usual.

Train logs: ``{task name: {"training_loss": ..., metrics..., "num_steps": steps of that
task so far}, "training_loss": mean over the window's steps, "learning_rate": ...}``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch import nn

from torchgarden.multitask.base_model import sub_model
from torchgarden.multitask.base_trainer import MultiTaskBaseTrainer
from torchgarden.multitask.task_sampler import TaskSampler
from torchgarden.optim import set_learning_rate
from torchgarden.utils.logs import Logs

__all__ = ["MultiTaskInterleavingTrainer"]


class _TaskRoute(nn.Module):
    """Task ``name``'s sub-model as its ``train_step`` sees it, called through the
    wrapped (DDP) multi-task model: ``route(x)`` is ``forward_model(x, task=name)``.

    Only the sub-model is a child, so ``parameters()`` and aux losses are the task's.
    """

    def __init__(self, module: nn.Module, forward_model: nn.Module, name: str) -> None:
        super().__init__()
        self.module = module
        object.__setattr__(self, "_forward_model", forward_model)  # Not a child module.
        self._task_name = name

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self._forward_model(*args, task=self._task_name, **kwargs)


class MultiTaskInterleavingTrainer(MultiTaskBaseTrainer):
    """Trains one task per step (the interleaving trainer).

    Args:
        task_sampler: Draws the task of each step; its task names are the tasks'.
        **kwargs: As for :class:`MultiTaskBaseTrainer`.
    """

    def __init__(self, *, task_sampler: TaskSampler, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        names = list(self._multi_task.tasks)
        if sorted(task_sampler.task_names) != sorted(names):
            raise ValueError(f"task_sampler samples {task_sampler.task_names}, but the tasks "
                             f"are {names}.")
        self._task_sampler = task_sampler
        #: Steps each task has trained so far (a checkpoint item).
        self.task_steps = dict.fromkeys(names, 0)
        raw, wrapped = self._raw_model, self._model
        self._task_models = {
            name: sub_model(raw, name) if wrapped is raw
            else _TaskRoute(sub_model(raw, name), wrapped, name)
            for name in names
        }

    @property
    def task_sampler(self) -> TaskSampler:
        return self._task_sampler

    def task_step_counter(self, name: str) -> int:
        """Steps task ``name`` has trained so far (Model Garden's name)."""
        return self.task_steps[name]

    def checkpoint_items(self) -> dict[str, Any]:
        """The joint trainer's items plus the sampler's generator and the step counts."""
        items = super().checkpoint_items()
        if self._train_iterator is not None:
            items["task_sampler"] = self._task_sampler
            items["task_steps"] = self.task_steps
        return items

    def train_step(self, iterator: Iterator[Any]) -> None:
        """One step of the task the sampler draws, with that task's ``train_step``."""
        step = self._global_step.value
        if self._lr_varies:
            set_learning_rate(self._optimizer, self._lr_schedule(step))  # type: ignore[misc]
        name = self._task_sampler.sample(step)
        task = self._tasks[name]
        logs = task.train_step(
            self.next_train_inputs(iterator.iterators[name]),  # type: ignore[attr-defined]
            model=self._task_models[name], optimizer=self._optimizer,
            metrics=self._task_metrics[name],
        )
        loss = logs[task.loss]
        self._task_losses[name].update_state(loss)
        self.task_steps[name] += 1
        self._finish_step(step, loss)

    def train_loop_end(self) -> Logs:
        """The joint trainer's logs with each trained task's ``num_steps`` so far."""
        logs = super().train_loop_end()
        for name, count in self.task_steps.items():
            if name in logs:
                logs[name]["num_steps"] = count
        return logs
