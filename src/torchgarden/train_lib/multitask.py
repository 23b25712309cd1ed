"""Multi-task configs become objects here: the trainers, the task sampler, the evaluator.

Model Garden's ``official/modeling/multitask/train_lib.py``. ``run_experiment`` calls
:func:`create_multitask_trainer` for a ``MultiTask`` and :func:`create_evaluator` for
every run; :func:`run_experiment_with_multitask_eval` trains one task and evaluates
several (``MultiEvalExperimentConfig`` does the same from a config).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from torch import nn

from torchgarden.config import ConfigError, ExperimentConfig
from torchgarden.config.multitask import (
    MultiEvalExperimentConfig,
    MultiTaskTrainerConfig,
    TaskRoutine,
    TaskSamplingConfig,
)
from torchgarden.core import Task, Trainer
from torchgarden.multitask import (
    AnnealingTaskSampler,
    MultiTask,
    MultiTaskBaseTrainer,
    MultiTaskEvaluator,
    MultiTaskInterleavingTrainer,
    ProportionalTaskSampler,
    TaskSampler,
    UniformTaskSampler,
)
from torchgarden.registry import RegistryError, get_task
from torchgarden.runtime import RuntimeContext, StepPlan, autocast_forward
from torchgarden.train_lib.builders import (
    build_ema,
    build_eval_inputs,
    build_eval_metrics,
    build_inputs,
    build_lr_schedule,
    create_optimizer,
    maybe_create_best_ckpt_exporter,
    recovery_bound,
)
from torchgarden.train_lib.model_dir import eval_dir

__all__ = ["build_eval_tasks", "build_task_sampler", "create_evaluator",
           "create_multitask_trainer"]

_DEFAULT_TRAINER = MultiTaskTrainerConfig()


def build_task_sampler(
    config: TaskSamplingConfig, task_weights: Mapping[str, float], *, seed: int
) -> TaskSampler:
    """The ``trainer.task_sampler`` of ``config.type`` over ``task_weights``."""
    if config.type == "uniform":
        return UniformTaskSampler(task_weights, seed=seed)
    if config.type == "annealing":
        return AnnealingTaskSampler(task_weights, seed=seed,
                                    steps_per_epoch=config.annealing.steps_per_epoch,
                                    total_steps=config.annealing.total_steps)
    return ProportionalTaskSampler(task_weights, alpha=config.proportional.alpha, seed=seed)


def create_multitask_trainer(
    params: ExperimentConfig, task: MultiTask, *, train: bool, runtime: RuntimeContext
) -> MultiTaskBaseTrainer:
    """Builds the multi-task model, optimizer, every task's data and the trainer of
    ``trainer.trainer_type`` (a trainer that only restores checkpoints unless ``train``).

    Raises:
        ConfigError: FSDP or ``runtime.enable_xla`` (multi-task training runs eagerly,
            single or DDP).
    """
    cfg = params.trainer
    trainer_type = getattr(cfg, "trainer_type", _DEFAULT_TRAINER.trainer_type)
    if runtime.strategy.shards_parameters or params.runtime.enable_xla:
        key = "runtime.enable_xla" if params.runtime.enable_xla else "runtime.distribution_strategy"
        raise ConfigError(f"{key}: multi-task training runs eagerly, on one process or "
                          "under DDP; use distribution_strategy ddp and enable_xla false", key=key)
    bound = recovery_bound(params)
    plan = StepPlan.build(check_loss=bound if cfg.recovery_check_every_step else None,
                          replay_check=None if runtime.is_distributed else bound)
    model = task.build_model().to(runtime.device)
    schedule = build_lr_schedule(params, chief=runtime.is_chief) if train else None
    optimizer = create_optimizer(params, task, model) if train else None
    tasks = task.tasks
    kwargs: dict[str, Any] = {
        "multi_task": task,
        "multi_task_model": model,
        "optimizer": optimizer,
        "train_data": {n: build_inputs(t, t.task_config.train_data, runtime)
                       for n, t in tasks.items()} if train else None,
        "train_metrics": {n: t.build_metrics(training=True) for n, t in tasks.items()}
        if train else None,
        "lr_schedule": schedule,
        "ema": build_ema(cfg, model) if train else None,
        "forward_model": _forward_model(model, runtime, interleaving=trainer_type != "joint"),
        "checkpoint_items": getattr(model, "checkpoint_items", None) or {},
        "plan": plan,
        "runtime": runtime,
    }
    if train and trainer_type != "joint":
        sampling = getattr(cfg, "task_sampler", None) or _DEFAULT_TRAINER.task_sampler
        seed = getattr(cfg, "task_sampler_seed", None)
        seed = seed if seed is not None else (params.runtime.seed or 0)
        return MultiTaskInterleavingTrainer(
            task_sampler=build_task_sampler(sampling, task.task_weights, seed=seed), **kwargs)
    return MultiTaskBaseTrainer(**kwargs)


def _forward_model(model: nn.Module, runtime: RuntimeContext, *, interleaving: bool) -> nn.Module:
    """Autocast on each sub-model's forward, then the strategy's wrapper over the whole
    model (DDP: unused parameters allowed when one task trains per step)."""
    if runtime.autocast_dtype is not None:
        for sub in {id(m): m for m in model.sub_tasks.values()}.values():
            autocast_forward(sub, runtime.device.type, runtime.autocast_dtype)
    return runtime.strategy.wrap_model(model, device=runtime.device,
                                       find_unused_parameters=interleaving)


def build_eval_tasks(
    routines: Sequence[TaskRoutine], logging_dir: str | None
) -> dict[str, Task]:
    """The tasks of ``eval_tasks`` routines, by name.

    Raises:
        RegistryError: A routine's config has no registered task (named with the routine).
    """
    tasks = {}
    for index, routine in enumerate(routines):
        try:
            tasks[routine.name] = get_task(routine.task_config, logging_dir=logging_dir,
                                           name=routine.name)
        except RegistryError as e:
            raise RegistryError(f"eval_tasks[{index}] ({routine.name}): {e}") from None
    return tasks


def create_evaluator(
    params: ExperimentConfig, task: Task, trainer: Trainer, *, evaluate: bool,
    model_dir: str, eval_tasks: Mapping[str, Task] | None = None,
    eval_steps: Mapping[str, int | None] | None = None,
) -> Any:
    """What evaluates ``trainer``'s model: the trainer itself for one task; a
    ``MultiTaskEvaluator`` for a ``MultiTask``, for ``eval_tasks``, or for a
    ``MultiEvalExperimentConfig``'s ``eval_tasks`` (each task into ``validation/<task>/``).

    The best-checkpoint exporter belongs to the multi-task evaluator (it exports the
    trainer's checkpoint); a job that does not train exports under ``model_dir/eval/``.
    """
    if eval_tasks is None and isinstance(task, MultiTask):
        eval_tasks, eval_steps = task.tasks, task.task_eval_steps
    elif eval_tasks is None and isinstance(params, MultiEvalExperimentConfig):
        eval_tasks = build_eval_tasks(params.eval_tasks, model_dir)
        eval_steps = {routine.name: routine.eval_steps for routine in params.eval_tasks}
    if eval_tasks is None or not evaluate:
        return trainer
    runtime = trainer.runtime
    training = trainer.optimizer is not None
    return MultiTaskEvaluator(
        eval_tasks=eval_tasks,
        model=trainer.unwrapped_model,
        eval_data={n: build_eval_inputs(t, t.task_config.validation_data, runtime)
                   for n, t in eval_tasks.items()},
        eval_metrics={n: build_eval_metrics(t, t.task_config.validation_data)
                      for n, t in eval_tasks.items()},
        eval_steps=eval_steps,
        global_step=trainer.global_step,
        ema=trainer.ema,
        checkpoint_exporter=maybe_create_best_ckpt_exporter(
            params, model_dir if training else eval_dir(model_dir), runtime),
        checkpoint=trainer.checkpoint,
        runtime=runtime,
    )

