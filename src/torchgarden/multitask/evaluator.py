"""``MultiTaskEvaluator``: one model evaluated by several tasks, each into its own logs.

Model Garden's ``official/modeling/multitask/evaluator.py``. Each task runs its own
evaluation (its ``validation_step``, metrics, ``aggregate_logs`` and named validation
sets) on its sub-model of a ``MultiTaskBaseModel``, or on the one model all tasks share
(``run_experiment_with_multitask_eval``: train one task, evaluate several). The logs
nest by task name: ``{"digits": {...}, "parity": {...}}``, written to
``validation/<task>/``; the best checkpoint may be chosen on any task's metric
(``"parity/accuracy"``).

Example:
    >>> evaluator = MultiTaskEvaluator(
    ...     eval_tasks=multi_task.tasks, model=model,
    ...     eval_data={n: t.build_inputs(t.task_config.validation_data)
    ...                for n, t in multi_task.tasks.items()},
    ...     eval_metrics={n: t.build_metrics(training=False)
    ...                   for n, t in multi_task.tasks.items()})
    >>> evaluator.evaluate(-1)   # {"digits": {"accuracy": ...}, "parity": {...}}
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

from torch import nn

from torchgarden.checkpoint import BestCheckpointExporter, Checkpoint
from torchgarden.core.evaluator import Evaluator, export_best
from torchgarden.core.state import GlobalStep
from torchgarden.core.task import Task
from torchgarden.multitask.base_model import sub_model
from torchgarden.optim import ExponentialMovingAverage
from torchgarden.runtime import RuntimeContext
from torchgarden.utils.logs import Logs

__all__ = ["MultiTaskEvaluator"]


class MultiTaskEvaluator:
    """Evaluates ``model`` with each of ``eval_tasks`` (Orbit's ``evaluate(num_steps)``).

    Args:
        eval_tasks: The tasks by name (a sequence is keyed by ``task.name``).
        model: A ``MultiTaskBaseModel`` (each task evaluates its sub-model) or one
            model every task evaluates.
        eval_data: Each task's eval data by name (itself a mapping for named sets).
        eval_metrics: Each task's eval metrics by name (a mapping of sets for named sets).
        eval_steps: Eval steps by task name; None or missing: ``evaluate``'s ``num_steps``.
        global_step: The step evaluations are reported at (the trainer's).
        ema: Weight averages swapped in for the whole evaluation.
        checkpoint_exporter: Exports the best checkpoint after each evaluation.
        checkpoint: What the exporter saves. Default: the model and the global step.
        runtime: The process' device and distribution strategy.
    """

    def __init__(
        self,
        *,
        eval_tasks: Mapping[str, Task] | Sequence[Task],
        model: nn.Module,
        eval_data: Mapping[str, Any],
        eval_metrics: Mapping[str, Any] | None = None,
        eval_steps: Mapping[str, int | None] | None = None,
        global_step: GlobalStep | None = None,
        ema: ExponentialMovingAverage | None = None,
        checkpoint_exporter: BestCheckpointExporter | None = None,
        checkpoint: Checkpoint | None = None,
        runtime: RuntimeContext | None = None,
    ) -> None:
        tasks = dict(eval_tasks) if isinstance(eval_tasks, Mapping) else (
            {task.name: task for task in eval_tasks})
        if not tasks:
            raise ValueError("MultiTaskEvaluator needs at least one eval task.")
        missing = sorted(set(tasks) - set(eval_data))
        if missing:
            raise ValueError(f"eval_data has no data for tasks {missing}.")
        self._model = model
        self._global_step = global_step if global_step is not None else GlobalStep()
        self._ema = ema
        self._checkpoint_exporter = checkpoint_exporter
        self._checkpoint = checkpoint
        metrics = dict(eval_metrics or {})
        self._eval_steps = dict(eval_steps or {})
        self._evaluators = {
            name: Evaluator(task=task, model=sub_model(model, name), eval_data=eval_data[name],
                            eval_metrics=metrics.get(name, ()), runtime=runtime,
                            global_step=self._global_step)
            for name, task in tasks.items()
        }
        self._runtime = next(iter(self._evaluators.values())).runtime

    @property
    def tasks(self) -> dict[str, Task]:
        return {name: evaluator.task for name, evaluator in self._evaluators.items()}

    @property
    def evaluators(self) -> dict[str, Evaluator]:
        """Each task's ``Evaluator`` by name."""
        return dict(self._evaluators)

    @property
    def model(self) -> nn.Module:
        return self._model

    @property
    def global_step(self) -> GlobalStep:
        return self._global_step

    @property
    def runtime(self) -> RuntimeContext:
        return self._runtime

    @property
    def checkpoint_exporter(self) -> BestCheckpointExporter | None:
        return self._checkpoint_exporter

    @property
    def checkpoint(self) -> Checkpoint:
        """What the best-checkpoint export saves."""
        if self._checkpoint is None:
            self._checkpoint = Checkpoint(model=self._model, global_step=self._global_step)
        return self._checkpoint

    def evaluate(self, num_steps: int) -> Logs:
        """Runs each task's evaluation (``eval_steps[name]`` steps, else ``num_steps``;
        -1: the whole set) and returns ``{task name: logs}``."""
        results: Logs = {}
        averaged = self._ema.average_weights() if self._ema is not None else (
            contextlib.nullcontext())
        with averaged:
            for name, evaluator in self._evaluators.items():
                steps = self._eval_steps.get(name) or num_steps
                results[name] = evaluator.evaluate(steps)
            export_best(self._checkpoint_exporter, self.checkpoint, results,
                        self._global_step.value)
        self._model.train()
        return results
