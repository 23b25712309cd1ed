"""Several tasks, one model: Model Garden's ``official/modeling/multitask`` on PyTorch.

* ``MultiTask`` — the tasks of a ``MultiTaskConfig`` (each an ordinary ``Task``), their
  weights and eval steps; ``build_multitask_model`` builds the shared model;
* ``MultiTaskBaseModel`` — shared modules and one sub-model per task;
* ``MultiTaskBaseTrainer`` (joint: every task each step, the weighted loss sum) and
  ``MultiTaskInterleavingTrainer`` (one task per step, drawn by a ``TaskSampler``:
  uniform, proportional, annealing);
* ``MultiTaskEvaluator`` — one model evaluated by several tasks into
  ``validation/<task>/``.

The configs (``MultiTaskConfig``, ``TaskRoutine``, ``MultiTaskExperimentConfig``,
``MultiEvalExperimentConfig``, ...) live in ``torchgarden.config`` and are re-exported
here; ``train_lib.run_experiment`` runs them (see docs/multitask.md).
"""

from torchgarden.config.multitask import (
    AnnealingSampleConfig,
    MultiEvalExperimentConfig,
    MultiTaskConfig,
    MultiTaskExperimentConfig,
    MultiTaskTrainerConfig,
    ProportionalSampleConfig,
    TaskRoutine,
    TaskSamplingConfig,
    UniformSampleConfig,
)
from torchgarden.multitask.base_model import MultiTaskBaseModel, sub_model
from torchgarden.multitask.base_trainer import MultiTaskBaseTrainer, TaskIterators
from torchgarden.multitask.evaluator import MultiTaskEvaluator
from torchgarden.multitask.interleaving_trainer import MultiTaskInterleavingTrainer
from torchgarden.multitask.multitask import MultiTask
from torchgarden.multitask.task_sampler import (
    AnnealingTaskSampler,
    ProportionalTaskSampler,
    TaskSampler,
    UniformTaskSampler,
)

__all__ = [
    "AnnealingSampleConfig",
    "AnnealingTaskSampler",
    "MultiEvalExperimentConfig",
    "MultiTask",
    "MultiTaskBaseModel",
    "MultiTaskBaseTrainer",
    "MultiTaskConfig",
    "MultiTaskEvaluator",
    "MultiTaskExperimentConfig",
    "MultiTaskInterleavingTrainer",
    "MultiTaskTrainerConfig",
    "ProportionalSampleConfig",
    "ProportionalTaskSampler",
    "TaskIterators",
    "TaskRoutine",
    "TaskSampler",
    "TaskSamplingConfig",
    "UniformSampleConfig",
    "UniformTaskSampler",
    "sub_model",
]
