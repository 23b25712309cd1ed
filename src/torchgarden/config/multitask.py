"""Multi-task experiment configs: Model Garden's ``official/modeling/multitask/configs.py``.

A ``MultiTaskConfig`` lists task routines (a name, a task config, a weight, eval steps);
``MultiTaskExperimentConfig`` runs them on one model with a joint or an interleaving
trainer; ``MultiEvalExperimentConfig`` trains one task and evaluates several.

Example:
    >>> routines = [TaskRoutine(task_name="digits", task_config=TaskConfig()),
    ...             TaskRoutine(task_name="parity", task_config=TaskConfig(), task_weight=0.5)]
    >>> MultiTaskConfig(task_routines=routines).task_names
    ['digits', 'parity']
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

from torchgarden.config._classes import TYPE_KEY, key_of
from torchgarden.config.base import Config
from torchgarden.config.definitions import DataConfig, ExperimentConfig, TaskConfig, TrainerConfig
from torchgarden.config.errors import ConfigError, choose, require
from torchgarden.config.oneof import OneOfConfig

__all__ = [
    "AnnealingSampleConfig", "MultiEvalExperimentConfig", "MultiTaskConfig",
    "MultiTaskExperimentConfig", "MultiTaskTrainerConfig", "ProportionalSampleConfig",
    "TaskRoutine", "TaskSamplingConfig", "UniformSampleConfig",
]

_field = dataclasses.field


@dataclasses.dataclass
class TaskRoutine(Config):
    """One task of a multi-task experiment."""

    task_name: str = ""
    """The task's name: its logs go to `train/<name>/` and `validation/<name>/`; empty
    uses `task_config.name`."""
    task_config: TaskConfig | None = None
    """The task's own config (any registered task)."""
    eval_steps: int | None = None
    """Eval steps of this task; None uses `trainer.validation_steps`, -1 the whole set."""
    task_weight: float = 1.0
    """Joint training: the factor of this task's loss in the sum. Interleaving: its
    sampling weight (set it to the dataset size to sample by size)."""

    @property
    def name(self) -> str:
        """``task_name``, else ``task_config.name``, else ""."""
        return self.task_name or (self.task_config.name if self.task_config else "") or ""

    def check(self) -> None:
        """Checks the weight, the eval steps and that a task config is set."""
        if self.task_config is None:
            key = self.field_path("task_config")
            raise ConfigError(f"{key} is not set; give the task's config (with _type)", key=key)
        require(self, "task_weight", math.isfinite(self.task_weight) and self.task_weight > 0,
                "a number > 0")
        steps = self.eval_steps
        require(self, "eval_steps", steps is None or steps > 0 or steps == -1,
                "None, > 0, or -1 for the whole set")


def check_routines(config: Config, field: str) -> None:
    """Checks that ``config.<field>`` names every routine once.

    Raises:
        ConfigError: No routine, a routine without a name, or two with the same name.
    """
    routines: list[TaskRoutine] = getattr(config, field)
    key = config.field_path(field)
    if not routines:
        raise ConfigError(f"{key} is empty; list at least one task routine", key=key)
    names: list[str] = []
    for index, routine in enumerate(routines):
        name = routine.name
        if not name:
            raise ConfigError(f"{key}[{index}].task_name is empty (and so is its "
                              "task_config.name); name the task", key=f"{key}[{index}].task_name")
        if not re.fullmatch(r"[A-Za-z0-9_-]+", name):
            # The name is a log subdirectory (train/<name>/) and a module key: never a path.
            raise ConfigError(
                f"{key}[{index}].task_name must be letters, digits, '_' or '-' (it names the "
                f"task's log directory train/<name>/), received {name!r}",
                key=f"{key}[{index}].task_name")
        if name in names:
            raise ConfigError(
                f"{key}[{index}].task_name: {name!r} is also the name of {key}"
                f"[{names.index(name)}]; every task needs its own name",
                key=f"{key}[{index}].task_name")
        names.append(name)


@dataclasses.dataclass
class MultiTaskConfig(TaskConfig):
    """Several tasks trained on one model (Model Garden's ``MultiTaskConfig``).

    ``model`` configures the shared multi-task model; ``init_checkpoint`` initialises
    it. Each routine keeps its own data (``task_config.train_data`` /
    ``validation_data``), so ``train_data`` and ``validation_data`` here must stay unset.
    """

    task_routines: list[TaskRoutine] = _field(default_factory=list)
    """The tasks, in order."""

    @property
    def task_names(self) -> list[str]:
        """The routines' names, in order."""
        return [routine.name for routine in self.task_routines]

    def check(self) -> None:
        """Checks the routines (names, weights) and that the shared data fields are unset.

        A routine whose task writes image summaries turns ``allow_image_summary`` on,
        so the evaluation writes them as images.
        """
        super().check()
        check_routines(self, "task_routines")
        for name in ("train_data", "validation_data"):
            if getattr(self, name) != DataConfig():
                key = self.field_path(name)
                raise ConfigError(
                    f"{key} is not used by a multi-task config; set task.task_routines[i]."
                    f"task_config.{name} of each task instead", key=key)
        images = any(r.task_config and r.task_config.allow_image_summary
                     for r in self.task_routines)
        if images and not self.allow_image_summary and not self.locked:
            self.allow_image_summary = True


@dataclasses.dataclass
class UniformSampleConfig(Config):
    """Every task equally often."""


@dataclasses.dataclass
class ProportionalSampleConfig(Config):
    """Tasks in proportion to ``task_weight ** alpha``."""

    alpha: float = 1.0
    """The exponent of the weights: 1 is proportional, 0 uniform."""

    def check(self) -> None:
        """Checks that ``alpha`` is finite and >= 0."""
        require(self, "alpha", math.isfinite(self.alpha) and self.alpha >= 0, "a number >= 0")


@dataclasses.dataclass
class AnnealingSampleConfig(Config):
    """Proportional at first, annealed to uniform by the last epoch (Stickland & Murray,
    2019): ``task_weight ** alpha`` with ``alpha = 1 - epoch / (num_epochs - 1)``."""

    steps_per_epoch: int = 5
    """Steps with the same distribution."""
    total_steps: int = 20
    """Steps over which alpha goes from 1 to 0 (usually `trainer.train_steps`)."""

    def check(self) -> None:
        """Checks that both counts are >= 1."""
        for name in ("steps_per_epoch", "total_steps"):
            require(self, name, getattr(self, name) >= 1, ">= 1")


@dataclasses.dataclass
class TaskSamplingConfig(OneOfConfig):
    """How the interleaving trainer picks the task of each step."""

    type: str | None = "proportional"
    """One of uniform, proportional, annealing."""
    uniform: UniformSampleConfig = _field(default_factory=UniformSampleConfig)
    proportional: ProportionalSampleConfig = _field(default_factory=ProportionalSampleConfig)
    annealing: AnnealingSampleConfig = _field(default_factory=AnnealingSampleConfig)


@dataclasses.dataclass
class MultiTaskTrainerConfig(TrainerConfig):
    """A ``TrainerConfig`` that also says how the tasks share the steps."""

    trainer_type: str = "interleaving"
    """"interleaving": one task per step, picked by `task_sampler`; "joint": every task
    each step, the loss the weighted sum."""
    task_sampler: TaskSamplingConfig = _field(default_factory=TaskSamplingConfig)
    """The interleaving trainer's task distribution."""
    task_sampler_seed: int | None = None
    """Seed of the task sampler; None uses `runtime.seed` (0 when unset)."""

    def check(self) -> None:
        """Checks the trainer type, the sampler and what multi-task training supports."""
        super().check()
        choose(self, "trainer_type", ("interleaving", "joint"))
        if self.task_sampler.type is None:
            key = self.field_path("task_sampler.type")
            raise ConfigError(f"{key} must be uniform, proportional or annealing", key=key)
        require(self, "gradient_accumulation_steps", self.gradient_accumulation_steps == 1,
                "1 for multi-task training")


class _TypedExperiment:
    """Writes the experiment's own class as ``_type`` so that ``params.yaml`` read back
    with ``ExperimentConfig.from_dict`` (``torchgarden eval`` without ``--experiment``)
    builds this class again."""

    def as_dict(self, *, include_type: bool = True) -> dict[str, Any]:
        data = super().as_dict(include_type=include_type)  # type: ignore[misc]
        return {TYPE_KEY: key_of(type(self)), **data} if include_type else data


@dataclasses.dataclass
class MultiTaskExperimentConfig(_TypedExperiment, ExperimentConfig):
    """Multi-task training and evaluation (Model Garden's ``MultiTaskExperimentConfig``)."""

    task: MultiTaskConfig = _field(default_factory=MultiTaskConfig)
    """The task routines and the shared model."""
    trainer: MultiTaskTrainerConfig = _field(default_factory=MultiTaskTrainerConfig)
    """How and when training runs, and how the tasks share the steps."""

    def check(self) -> None:
        """Checks what a multi-task run does not support."""
        runtime = self.runtime
        if runtime.distribution_strategy == "fsdp":
            raise ConfigError("runtime.distribution_strategy: multi-task training runs "
                              "single or ddp, not fsdp", key="runtime.distribution_strategy")
        if runtime.enable_xla:
            raise ConfigError("runtime.enable_xla: multi-task training runs eagerly; set it "
                              "to false", key="runtime.enable_xla")


@dataclasses.dataclass
class MultiEvalExperimentConfig(_TypedExperiment, ExperimentConfig):
    """Train ``task``, evaluate with each of ``eval_tasks`` (Model Garden's
    ``MultiEvalExperimentConfig``): logs go to ``validation/<eval task name>/``."""

    eval_tasks: list[TaskRoutine] = _field(default_factory=list)
    """The evaluation tasks; their weights are not used."""

    def check(self) -> None:
        """Checks that every evaluation task has its own name."""
        check_routines(self, "eval_tasks")
