"""``MultiTask``: several tasks, their weights and eval steps, and the shared model.

Model Garden's ``official/modeling/multitask/multitask.py``. Each routine's task is an
ordinary single-task ``Task`` (built from its config by the registry), so every
existing task works unchanged inside a multi-task run: the interleaving trainer calls
its ``train_step``; the joint trainer its ``split_inputs``, ``build_losses`` and
``process_metrics``; evaluation its ``validation_step``, metrics and ``aggregate_logs``.

A ``MultiTask`` is registered for ``MultiTaskConfig``; subclass it (and the config) to
share modules between the tasks: override ``build_multitask_model``.

Example:
    >>> multi_task = MultiTask(config)          # config: a MultiTaskConfig
    >>> model = multi_task.build_multitask_model()
    >>> multi_task.task_weights
    {'digits': 1.0, 'parity': 0.5}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from torchgarden.config.multitask import MultiTaskConfig
from torchgarden.core.serving import Serving
from torchgarden.core.task import Task, scale_loss
from torchgarden.layers import model_losses
from torchgarden.multitask.base_model import MultiTaskBaseModel, sub_model
from torchgarden.registry import RegistryError, get_task
from torchgarden.utils.logs import Logs

__all__ = ["MultiTask"]


class MultiTask(Task):
    """The tasks of a ``MultiTaskConfig``, by name, with their weights and eval steps.

    Args:
        params: The multi-task config (its ``task_routines`` name the tasks).
        logging_dir: Directory the tasks may write to (usually ``model_dir``).
        name: Optional name; defaults to the class name.
        tasks: The built tasks by routine name. Default: each built from its routine's
            ``task_config`` with ``registry.get_task``.

    Raises:
        RegistryError: A routine's config has no registered task (named with the routine).
    """

    def __init__(
        self, params: MultiTaskConfig, logging_dir: str | None = None, name: str | None = None,
        *, tasks: Mapping[str, Task] | None = None,
    ) -> None:
        super().__init__(params, logging_dir=logging_dir, name=name)
        routines = params.task_routines
        names = [routine.name for routine in routines]
        if tasks is None:
            tasks = {routine.name: _build_task(routine, index, logging_dir)
                     for index, routine in enumerate(routines)}
        elif sorted(tasks) != sorted(names):
            raise ValueError(f"tasks {sorted(tasks)} do not match task_routines {names}.")
        self._tasks = {n: tasks[n] for n in names}
        self._task_weights = {routine.name: float(routine.task_weight) for routine in routines}
        #: Eval steps by task name (None: ``trainer.validation_steps``).
        self.task_eval_steps: dict[str, int | None] = {r.name: r.eval_steps for r in routines}

    @classmethod
    def from_config(cls, config: MultiTaskConfig, logging_dir: str | None = None) -> MultiTask:
        """Model Garden's spelling of ``MultiTask(config, logging_dir)``."""
        return cls(config, logging_dir=logging_dir)

    @property
    def tasks(self) -> dict[str, Task]:
        """The tasks by name, in routine order."""
        return dict(self._tasks)

    @property
    def task_weights(self) -> dict[str, float]:
        """``task_weight`` by task name: a loss factor (joint) or sampling weight."""
        return dict(self._task_weights)

    def task_weight(self, task_name: str) -> float:
        return self._task_weights[task_name]

    # ------------------------------------------------------------------ building

    def build_model(self) -> nn.Module:
        """Returns :meth:`build_multitask_model` (what ``create_trainer`` calls)."""
        return self.build_multitask_model()

    def build_multitask_model(self) -> MultiTaskBaseModel:
        """The model of all tasks. Default: each task's own ``build_model()``, nothing
        shared; override it to share modules (see ``MultiTaskBaseModel``)."""
        return MultiTaskBaseModel({name: task.build_model() for name, task in self._tasks.items()})

    def build_inputs(self, params: Any, input_context: Any = None) -> Any:
        raise TypeError("a MultiTask has no data of its own: each task builds its inputs "
                        "from task.task_routines[i].task_config.train_data/validation_data.")

    def build_serving_module(self, model: nn.Module) -> Serving:
        """Serves the first task's sub-model with that task's serving module."""
        name, task = next(iter(self._tasks.items()))
        return task.build_serving_module(sub_model(model, name))

    def initialize(self, model: nn.Module) -> None:
        """Loads ``init_checkpoint`` into the whole model, then each task's own
        ``init_checkpoint`` into its sub-model (a single-task checkpoint fits there)."""
        super().initialize(model)
        for name, task in self._tasks.items():
            task.initialize(sub_model(model, name))

    # ------------------------------------------------------------------ steps

    def joint_train_step(
        self,
        task_inputs: Mapping[str, Any],
        multi_task_model: nn.Module,
        optimizer: Any,
        task_metrics: Mapping[str, Sequence[Any]],
        *,
        forward_model: nn.Module | None = None,
    ) -> Logs:
        """One update on the weighted sum of every task's loss (one forward, one backward).

        Args:
            task_inputs: ``{task name: batch}``, each split with ``task.split_inputs``.
            multi_task_model: The ``MultiTaskBaseModel`` (its sub-models' aux losses are
                added to each task's loss).
            optimizer: The optimizer (``scale(loss)`` applied under float16).
            task_metrics: Train metrics by task name.
            forward_model: What runs the forward pass (the model wrapped for DDP).
                Default: ``multi_task_model``.

        Returns:
            ``{task name: detached task loss, "total_loss": weighted sum}``.
        """
        optimizer.zero_grad(set_to_none=True)
        features, labels = {}, {}
        for name, task in self._tasks.items():
            features[name], labels[name] = task.split_inputs(task_inputs[name])
        outputs = (forward_model or multi_task_model)(features)
        logs: Logs = {}
        total: torch.Tensor | None = None
        for name, task in self._tasks.items():
            loss = task.build_losses(labels[name], outputs[name],
                                     aux_losses=model_losses(sub_model(multi_task_model, name)))
            weighted = self._task_weights[name] * loss
            total = weighted if total is None else total + weighted
            logs[name] = loss.detach()
            if task_metrics.get(name):
                task.process_metrics(task_metrics[name], labels[name], outputs[name])
        assert total is not None  # A MultiTask has at least one task.
        scale_loss(total, optimizer).backward()
        optimizer.step()
        logs["total_loss"] = total.detach()
        return logs

    def train_step(self, inputs: Any, model: nn.Module, optimizer: Any,
                   metrics: Sequence[Any] | None = None) -> Logs:
        """``joint_train_step`` with ``inputs`` and ``metrics`` keyed by task name."""
        return self.joint_train_step(inputs, model, optimizer, metrics or {})  # type: ignore[arg-type]

    def validation_step(self, inputs: Any, model: nn.Module,
                        metrics: Sequence[Any] | None = None) -> Logs:
        raise TypeError("a MultiTask validates task by task: use "
                        "torchgarden.multitask.MultiTaskEvaluator.")


def _build_task(routine: Any, index: int, logging_dir: str | None) -> Task:
    try:
        return get_task(routine.task_config, logging_dir=logging_dir, name=routine.name)
    except RegistryError as e:
        raise RegistryError(f"task.task_routines[{index}] ({routine.name}): {e}") from None
