"""Configs become objects here: the model, its optimizer, data, metrics, the Trainer.

Model Garden's ``train_utils.create_trainer``. Each builder takes a config section and
built objects and returns a new object; nothing else in torchgarden reads an
``ExperimentConfig`` to build something.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from torchgarden import distribute, optim
from torchgarden.checkpoint import BestCheckpointExporter
from torchgarden.compile import choose_steps_per_call, compiled_train_step
from torchgarden.config import (
    ConfigError,
    DataConfig,
    ExperimentConfig,
    OptimizationConfig,
    TrainerConfig,
)
from torchgarden.core import StepFunction, Task, Trainer
from torchgarden.data import InputContext
from torchgarden.runtime import RuntimeContext, autocast_forward, setup_runtime
from torchgarden.train_lib.model_dir import eval_dir

__all__ = [
    "LossBound",
    "build_ema",
    "build_eval_inputs",
    "build_eval_metrics",
    "build_forward_model",
    "build_inputs",
    "checkpoint_format",
    "create_trainer",
    "optimizer_config_for",
    "maybe_create_best_ckpt_exporter",
]


@dataclasses.dataclass(frozen=True)
class LossBound:
    """``trainer.recovery_check_every_step``: is a step's loss a blow-up?

    Attributes:
        upper_bound: ``trainer.loss_upper_bound``.
        begin_steps: ``trainer.recovery_begin_steps``: the bound holds from this step on.
    """

    upper_bound: float
    begin_steps: int

    def __call__(self, step: int, loss: float) -> bool:
        """True for a NaN loss, or a loss above the bound from ``begin_steps`` on."""
        return loss != loss or (step >= self.begin_steps and loss > self.upper_bound)


def create_trainer(
    params: ExperimentConfig,
    task: Task,
    *,
    train: bool,
    evaluate: bool,
    model_dir: str | None = None,
    runtime: RuntimeContext | None = None,
    trainer_cls: type[Trainer] | None = None,
) -> Trainer:
    """Builds the model, optimizer, data and ``Trainer`` for ``task`` from ``params``.

    Args:
        params: The experiment config.
        task: The task (from ``get_task``).
        train: Whether the trainer trains (builds the optimizer, train data and metrics).
        evaluate: Whether it evaluates (builds validation data and metrics).
        model_dir: The run's model_dir: the best-checkpoint exporter (when configured)
            writes in it, or, for a trainer that does not train, under its ``eval/``.
        runtime: The process' runtime context; default: ``setup_runtime(params.runtime)``.
        trainer_cls: A ``Trainer`` subclass to build instead of ``Trainer``.
    """
    runtime = runtime or setup_runtime(params.runtime)
    cfg = params.trainer
    model = task.build_model().to(runtime.device)
    optimizer = _create_optimizer(params, task, model) if train else None
    eager_model = build_forward_model(model, runtime, optimizer)
    forward_model, step_fn = eager_model, None
    if params.runtime.enable_xla:
        forward_model = torch.compile(eager_model, mode=params.runtime.compile_mode)
        if train:
            step_fn = _compiled_step(params, task, eager_model, optimizer, runtime)
        if step_fn is not None and not params.runtime.compile_eval:
            forward_model = eager_model  # The graph trains; evaluation stays eager.
    return (trainer_cls or Trainer)(
        task=task,
        model=model,
        optimizer=optimizer,
        train_data=build_inputs(task, params.task.train_data, runtime) if train else None,
        eval_data=build_eval_inputs(task, params.task.validation_data, runtime) if evaluate else None,
        train_metrics=task.build_metrics(training=True) if train else (),
        eval_metrics=build_eval_metrics(task, params.task.validation_data) if evaluate else (),
        lr_schedule=optim.build_learning_rate(optimizer_config_for(params)) if train else None,
        ema=build_ema(cfg, model) if train else None,
        step_fn=step_fn,
        forward_model=forward_model,
        gradient_accumulation_steps=cfg.gradient_accumulation_steps if train else 1,
        checkpoint_items=getattr(model, "checkpoint_items", None) or {},
        checkpoint_exporter=maybe_create_best_ckpt_exporter(
            params, model_dir if train or not model_dir else eval_dir(model_dir)
        ),
        check_loss=_loss_bound(cfg) if train else None,
        runtime=runtime,
    )


def _create_optimizer(params: ExperimentConfig, task: Task, model: nn.Module) -> Any:
    """``task.create_optimizer`` after checking the schedule; torch's refusals name the key."""
    cfg = params.trainer
    optimizer_config = optimizer_config_for(params)
    schedule = optim.build_learning_rate(optimizer_config)
    for step in sorted({0, cfg.train_steps // 2, cfg.train_steps}):
        rate = float(schedule(step))
        if not (math.isfinite(rate) and rate >= 0):
            kind = cfg.optimizer_config.learning_rate.type
            raise ConfigError(
                f"trainer.optimizer_config.learning_rate.{kind}: the learning rate at step "
                f"{step} is {rate}; a learning rate must be finite and >= 0",
                key="trainer.optimizer_config.learning_rate",
            )
    try:
        return task.create_optimizer(optimizer_config, model, params.runtime)
    except ValueError as e:
        if isinstance(e, ConfigError) or not str(e).startswith("Invalid "):
            raise
        kind = cfg.optimizer_config.optimizer.type
        raise ConfigError(
            f"trainer.optimizer_config.optimizer.{kind}: torch refuses a setting ({e})",
            key=f"trainer.optimizer_config.optimizer.{kind}",
        ) from e


def optimizer_config_for(params: ExperimentConfig) -> OptimizationConfig:
    """``trainer.optimizer_config`` with a ``decay_steps`` of -1 resolved to the run's
    length: ``trainer.train_steps`` minus the schedule's ``offset``."""
    config = params.trainer.optimizer_config
    kind = getattr(config.learning_rate, "type", None)
    schedule = getattr(config.learning_rate, kind, None) if kind else None
    if getattr(schedule, "decay_steps", None) != -1:
        return config
    config = config.copy()
    schedule = getattr(config.learning_rate, kind)
    offset = int(getattr(schedule, "offset", 0) or 0)
    schedule.decay_steps = max(params.trainer.train_steps - offset, 1)
    return config


def build_forward_model(model: nn.Module, runtime: RuntimeContext, optimizer: Any) -> nn.Module:
    """Wraps ``model`` for the runtime: autocast forward, then DDP or FSDP2.

    Under FSDP2 the parameters are sharded in place and ``optimizer`` (built on the
    unsharded ones) is pointed at the shards.

    Returns:
        The module train and eval steps call (``model`` itself unless DDP wraps it).
    """
    if runtime.autocast_dtype is not None:
        model = autocast_forward(model, runtime.device.type, runtime.autocast_dtype)
    if runtime.strategy == "ddp":
        ids = [runtime.device.index] if runtime.device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids)
    if runtime.strategy == "fsdp":
        replaced = distribute.shard_model(model)
        if optimizer is not None:
            distribute.rebind_optimizer(optimizer, replaced)
    return model


def _compiled_step(
    params: ExperimentConfig, task: Task, model: nn.Module, optimizer: Any,
    runtime: RuntimeContext,
) -> StepFunction | None:
    cfg = params.trainer
    # Loss checks after every step and the weight EMA need the host between steps.
    per_step = cfg.optimizer_config.ema is not None or _loss_bound(cfg) is not None
    return compiled_train_step(
        task, model, optimizer, mode=params.runtime.compile_mode, strategy=runtime.strategy,
        accumulation_steps=cfg.gradient_accumulation_steps,
        steps_per_call=1 if per_step else choose_steps_per_call(
            model, cfg.steps_per_loop, params.runtime.steps_per_graph),
    )


def build_inputs(task: Task, data_config: DataConfig, runtime: RuntimeContext) -> Any:
    """``task.build_inputs`` for this process' share of the data.

    Raises:
        ValueError: A sized training loader yields no batch (fewer examples than one
            batch under ``drop_remainder``): found now, not at the first step.
    """
    context = InputContext(num_replicas=runtime.world_size, replica_id=runtime.rank)
    loader = task.build_inputs(data_config, input_context=context)
    if data_config.is_training:
        _check_yields_batches(loader, data_config)
    return loader


def _check_yields_batches(loader: Any, data_config: DataConfig) -> None:
    try:
        empty = len(loader) == 0
        examples = len(loader.dataset)
    except (TypeError, AttributeError):  # Unsized iterables are checked by DataIterator.
        return
    if empty:
        raise ValueError(
            f"task.train_data yields no batch: {examples} examples "
            f"(input_path={getattr(data_config, 'input_path', '')!r}) and global_batch_size="
            f"{getattr(data_config, 'global_batch_size', '?')} with drop_remainder=True; lower "
            "task.train_data.global_batch_size or set task.train_data.drop_remainder=false."
        )


def build_ema(trainer_config: TrainerConfig, model: nn.Module) -> optim.ExponentialMovingAverage | None:
    """The weight EMA of ``trainer.optimizer_config.ema``, or None when it is unset."""
    ema = trainer_config.optimizer_config.ema
    if ema is None:
        return None
    return optim.ExponentialMovingAverage(
        model,
        average_decay=ema.average_decay,
        start_step=ema.start_step,
        dynamic_decay=ema.dynamic_decay,
        trainable_weights_only=ema.trainable_weights_only,
    )


def _loss_bound(trainer_config: TrainerConfig) -> LossBound | None:
    if not trainer_config.recovery_check_every_step or trainer_config.recovery_max_trials < 0:
        return None
    return LossBound(trainer_config.loss_upper_bound, trainer_config.recovery_begin_steps)


def maybe_create_best_ckpt_exporter(
    params: ExperimentConfig, model_dir: str | os.PathLike[str] | None
) -> BestCheckpointExporter | None:
    """A ``BestCheckpointExporter`` when ``best_checkpoint_export_subdir`` and
    ``best_checkpoint_eval_metric`` are both set, else None (REFERENCE §3.4)."""
    trainer = params.trainer
    subdir, metric = trainer.best_checkpoint_export_subdir, trainer.best_checkpoint_eval_metric
    if not (model_dir and subdir and metric):
        return None
    return BestCheckpointExporter(
        os.path.join(model_dir, subdir), metric, trainer.best_checkpoint_metric_comp,
        checkpoint_format=checkpoint_format(params),
    )


def build_eval_inputs(task: Task, validation_data: Any, runtime: RuntimeContext) -> Any:
    """``build_inputs`` of ``task.validation_data``, or ``{name: inputs}`` of each named
    validation set."""
    if isinstance(validation_data, Mapping):
        return {name: build_inputs(task, data, runtime) for name, data in validation_data.items()}
    return build_inputs(task, validation_data, runtime)


def build_eval_metrics(task: Task, validation_data: Any) -> Any:
    """The task's eval metrics, or ``{name: metrics}``: new ones for each named set."""
    if isinstance(validation_data, Mapping):
        return {name: task.build_metrics(training=False) for name in validation_data}
    return task.build_metrics(training=False)


def checkpoint_format(params: ExperimentConfig) -> str:
    """``trainer.checkpoint_format`` resolved: ``"auto"`` is ``"dcp"`` for a run configured
    for FSDP2 (at any world size, so a resumed run keeps the format), else ``"single"``."""
    chosen = params.trainer.checkpoint_format
    if chosen != "auto":
        return chosen
    return "dcp" if params.runtime.distribution_strategy == "fsdp" else "single"
