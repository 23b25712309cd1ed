"""Configs become objects here: the model, its optimizer, data, metrics, the Trainer.

Model Garden's ``train_utils.create_trainer``. Each builder takes a config section and
built objects and returns a new object; nothing else in torchgarden reads an
``ExperimentConfig`` to build something.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from torchgarden import optim
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
from torchgarden.distribute.collectives import is_chief
from torchgarden.runtime import (
    LossBound,
    RuntimeContext,
    StepPlan,
    autocast_forward,
    resolve_strategy,
    setup_runtime,
)
from torchgarden.train_lib.model_dir import best_export_dir, eval_dir
from torchgarden.utils import startup
from torchgarden.utils.files import atomic_write_json

__all__ = [
    "build_ema",
    "build_eval_inputs",
    "build_eval_metrics",
    "build_forward_model",
    "build_freeze_schedule",
    "build_inputs",
    "build_lr_schedule",
    "build_step_plan",
    "create_optimizer",
    "create_trainer",
    "optimizer_config_for",
    "maybe_create_best_ckpt_exporter",
    "recovery_bound",
]

_logger = logging.getLogger("torchgarden")


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
    """Builds the model, optimizer, data, step plan and ``Trainer`` for ``task`` from ``params``.

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
    trainer_cls = trainer_cls or Trainer
    with startup.timed("model"):
        model, items = _adapted(task.build_model(), params, runtime)
        model = model.to(runtime.device)
        schedule = build_lr_schedule(params, chief=runtime.is_chief) if train else None
        freeze = build_freeze_schedule(params, model, runtime) if train else None
        with _ever_trainable(freeze):
            optimizer = create_optimizer(params, task, model, model_dir=model_dir) if train else None
        eager_model = build_forward_model(model, runtime, optimizer)
        with _ever_trainable(freeze):
            ema = build_ema(params.trainer, model) if train else None  # Of the sharded parameters.
        plan, step_fn = StepPlan(), None
        if train:
            plan, step_fn = build_step_plan(params, task, eager_model, optimizer, runtime,
                                            ema=ema, trainer_cls=trainer_cls)
        if hasattr(step_fn, "run_steps"):  # Its first graph call compiles: start-up too.
            startup.expect("compile")
        forward_model = eager_model
        if params.runtime.enable_xla and (step_fn is None or params.runtime.compile_eval):
            forward_model = torch.compile(eager_model, mode=params.runtime.compile_mode)
            if train and step_fn is None:  # The eager step calls it: it compiles in step 1.
                startup.time_first_call(forward_model)
    return trainer_cls(
        task=task, model=model, optimizer=optimizer,
        train_data=build_inputs(task, params.task.train_data, runtime) if train else None,
        eval_data=build_eval_inputs(task, params.task.validation_data, runtime) if evaluate else None,
        train_metrics=task.build_metrics(training=True) if train else (),
        eval_metrics=build_eval_metrics(task, params.task.validation_data) if evaluate else (),
        lr_schedule=schedule, ema=ema, step_fn=step_fn, forward_model=forward_model, plan=plan,
        checkpoint_items={**(getattr(model, "checkpoint_items", None) or {}), **items},
        **({"freeze": freeze} if freeze is not None else {}),
        checkpoint_exporter=maybe_create_best_ckpt_exporter(
            params, model_dir if train or not model_dir else eval_dir(model_dir), runtime),
        runtime=runtime,
    )


def build_freeze_schedule(params: ExperimentConfig, model: nn.Module,
                          runtime: RuntimeContext) -> optim.FreezeSchedule | None:
    """``trainer.freeze`` and its unfreeze schedule, or None when nothing is frozen.

    Raises:
        ConfigError: A schedule the run cannot follow: under ``runtime.enable_xla`` (the
            compiled step binds the trainable parameters once) or several processes (DDP
            buckets them once).
    """
    cfg = params.trainer
    if not cfg.freeze:
        return None
    unfreeze = [(s.step, s.patterns) for s in cfg.unfreeze_schedule]
    if cfg.unfreeze_at_step is not None:
        unfreeze.append((cfg.unfreeze_at_step, []))
    if unfreeze and (params.runtime.enable_xla or runtime.is_distributed):
        key = "trainer.unfreeze_schedule" if cfg.unfreeze_schedule else "trainer.unfreeze_at_step"
        why = "runtime.enable_xla=true" if params.runtime.enable_xla else "several processes"
        raise ConfigError(f"{key}: an unfreeze schedule cannot run under {why} (the trainable "
                          "parameters are bound once); unset it or run eagerly in one process",
                          key=key)
    return optim.FreezeSchedule(model, freeze=cfg.freeze, unfreeze=unfreeze,
                                freeze_batch_norm_stats=cfg.freeze_batch_norm_stats)


def _apply_param_rules(params: ExperimentConfig, optimizer: Any, model: nn.Module,
                       model_dir: str | None) -> None:
    """``trainer.param_rules`` / ``layerwise_lr_decay`` on the built optimizer; the groups
    are logged (``--verbose``) and written to ``model_dir/param_groups.json``."""
    cfg = params.trainer
    if not cfg.param_rules and cfg.layerwise_lr_decay == 1.0:
        return
    rules = [(r.pattern, r.lr_mult, r.decay_mult) for r in cfg.param_rules]
    summary = optim.apply_param_rules(optimizer, model, rules=rules,
                                      layerwise_lr_decay=cfg.layerwise_lr_decay)
    for group in summary:
        _logger.info("param group: lr x%.4g, weight_decay %s, %d tensors (%s%s)",
                     group["lr_mult"], group["weight_decay"], group["num_params"],
                     ", ".join(group["names"][:3]), ", ..." if group["num_params"] > 3 else "")
    if model_dir and is_chief():  # Renamed into place: never written through a link.
        os.makedirs(model_dir, exist_ok=True)
        atomic_write_json(os.path.join(model_dir, "param_groups.json"), summary)


def _adapted(model: nn.Module, params: ExperimentConfig, runtime: RuntimeContext
             ) -> tuple[nn.Module, dict[str, Any]]:
    """``task.model.adapter`` (LoRA through PEFT) on the built model, and the checkpoint
    items it changes (``model``: its trained tensors only, when that is enough)."""
    adapter = getattr(getattr(params.task, "model", None), "adapter", None)
    if adapter is None or not getattr(adapter, "type", ""):
        return model, {}
    from torchgarden.models.lora import adapt_model  # peft: only when an adapter is set.

    model, item = adapt_model(model, params.task, report=runtime.is_chief)
    return model, ({"model": item} if item is not model else {})


def _ever_trainable(freeze: Any) -> Any:
    return freeze.all_trainable() if freeze is not None else contextlib.nullcontext()


def recovery_bound(params: ExperimentConfig) -> LossBound | None:
    """The blow-up test of ``trainer.loss_upper_bound`` / ``recovery_begin_steps``, or None
    when recovery is off (``recovery_max_trials < 0``)."""
    cfg = params.trainer
    if cfg.recovery_max_trials < 0:
        return None
    return LossBound(cfg.loss_upper_bound, cfg.recovery_begin_steps)


def build_step_plan(
    params: ExperimentConfig, task: Task, model: nn.Module, optimizer: Any,
    runtime: RuntimeContext, *, ema: Any, trainer_cls: type[Trainer],
) -> tuple[StepPlan, StepFunction | None]:
    """The run's frozen ``StepPlan`` and the compiled step it calls (None: ``task.train_step``).

    What needs the host between steps -- the weight EMA, an overridden ``train_step``, a
    loss check after every step (``trainer.recovery_check_every_step``) -- makes it one
    step per call; blow-up recovery replays under ``plan.replay`` (one step per call,
    checked), declared here, in one process (under torchrun, ranks roll back on the
    loop's all-reduced loss only: per-step checks could stop them at different steps).
    """
    cfg, bound = params.trainer, recovery_bound(params)
    compiled = params.runtime.enable_xla
    steps = choose_steps_per_call(model, cfg.steps_per_loop, params.runtime.steps_per_graph,
                                  train_steps=cfg.train_steps) if compiled else 1
    plan = StepPlan.build(
        steps_per_call=steps, accumulation_steps=cfg.gradient_accumulation_steps,
        check_loss=bound if cfg.recovery_check_every_step else None,
        replay_check=None if runtime.is_distributed else bound,
        host_between_steps=trainer_cls.host_between_steps(ema=ema),
    )
    step_fn = compiled_train_step(
        task, model, optimizer, mode=params.runtime.compile_mode, strategy=runtime.strategy,
        accumulation_steps=plan.accumulation_steps, steps_per_call=plan.steps_per_call,
    ) if compiled else None
    if step_fn is None and plan.steps_per_call > 1:  # Not covered: the eager step.
        plan = dataclasses.replace(plan, steps_per_call=1)
    return plan, step_fn


def build_lr_schedule(params: ExperimentConfig, *, chief: bool = True) -> Any:
    """The schedule of ``trainer.optimizer_config`` (:func:`optimizer_config_for`), checked:
    finite and >= 0 at steps 0, ``train_steps // 2`` and ``train_steps``; on the chief, a
    warning when its decay ends before ``train_steps`` (the rest trains at the final rate).

    Raises:
        ConfigError: A rate that is not finite or is negative, naming the schedule's key.
    """
    cfg = params.trainer
    kind = cfg.optimizer_config.learning_rate.type
    schedule = optim.build_learning_rate(optimizer_config_for(params))
    for step in sorted({0, cfg.train_steps // 2, cfg.train_steps}):
        rate = float(schedule(step))
        if not (math.isfinite(rate) and rate >= 0):
            key = f"trainer.optimizer_config.learning_rate.{kind}"
            chosen = cfg.optimizer_config.learning_rate.get()
            values = ", ".join(f"{name}={value!r}" for name, value in chosen.as_dict().items()
                               if name != "name")
            raise ConfigError(  # Each field was valid alone (ScheduleConfig.check).
                f"{key}: {values} give the learning rate {rate} at step {step}; a learning "
                "rate must be finite and >= 0", key=key)
    end = _decay_end(schedule)
    if chief and end is not None and end < cfg.train_steps:
        _logger.warning(
            f"the learning-rate schedule ends at step {end} (trainer.optimizer_config."
            f"learning_rate.{kind}.decay_steps), before trainer.train_steps={cfg.train_steps}: "
            f"steps {end + 1}-{cfg.train_steps} train at the final rate {schedule(end):.3g}. "
            f"Set decay_steps={cfg.train_steps}, or -1 to follow trainer.train_steps.")
    return schedule


def _decay_end(schedule: Any) -> int | None:
    """The step after which a decaying schedule (cosine, polynomial without ``cycle``)
    stays at its final rate, looking through warmup wrappers; None if it never ends."""
    for _ in range(8):
        steps = getattr(schedule, "decay_steps", None)
        if steps is not None and type(schedule).__name__ in ("CosineDecay", "PolynomialDecay"):
            return None if getattr(schedule, "cycle", False) else (
                int(steps) + int(getattr(schedule, "offset", 0) or 0))
        schedule = getattr(schedule, "after", None) or getattr(schedule, "schedule", None)
    return None


def create_optimizer(params: ExperimentConfig, task: Task, model: nn.Module, *,
                     model_dir: str | None = None) -> Any:
    """``task.create_optimizer``, then ``trainer.param_rules`` / ``layerwise_lr_decay``
    (the groups written to ``model_dir/param_groups.json`` by the chief); torch's
    refusal of a setting names the config key."""
    optimizer = _task_optimizer(params, task, model)
    _apply_param_rules(params, optimizer, model, model_dir)
    return optimizer


def _task_optimizer(params: ExperimentConfig, task: Task, model: nn.Module) -> Any:
    cfg = params.trainer
    try:
        return task.create_optimizer(optimizer_config_for(params), model, params.runtime)
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
    """Wraps ``model`` for the runtime: autocast forward, then the strategy's wrapper (DDP,
    or FSDP2 sharding in place with ``optimizer`` pointed at the shards).

    Returns:
        The module train and eval steps call (``model`` itself unless DDP wraps it).
    """
    if runtime.autocast_dtype is not None:
        model = autocast_forward(model, runtime.device.type, runtime.autocast_dtype)
    return runtime.strategy.wrap_model(model, optimizer=optimizer, device=runtime.device)


def build_inputs(task: Task, data_config: DataConfig, runtime: RuntimeContext) -> Any:
    """``task.build_inputs`` for this process' share of the data.

    Raises:
        ValueError: A sized training loader yields no batch (fewer examples than one
            batch under ``drop_remainder``): found now, not at the first step.
    """
    context = InputContext(num_replicas=runtime.world_size, replica_id=runtime.rank)
    with startup.timed("data"):
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
        model, average_decay=ema.average_decay, start_step=ema.start_step,
        dynamic_decay=ema.dynamic_decay, trainable_weights_only=ema.trainable_weights_only)


def maybe_create_best_ckpt_exporter(
    params: ExperimentConfig, model_dir: str | os.PathLike[str] | None,
    runtime: RuntimeContext | None = None,
) -> BestCheckpointExporter | None:
    """A ``BestCheckpointExporter`` when ``best_checkpoint_export_subdir`` and
    ``best_checkpoint_eval_metric`` are both set, else None (REFERENCE §3.4); it writes
    in the checkpoint format of ``runtime``'s strategy (default one process)."""
    export_dir = best_export_dir(params, model_dir)
    if export_dir is None:
        return None
    trainer = params.trainer
    strategy = runtime.strategy if runtime is not None else resolve_strategy(params.runtime)
    return BestCheckpointExporter(
        export_dir, trainer.best_checkpoint_eval_metric, trainer.best_checkpoint_metric_comp,
        checkpoint_format=strategy.checkpoint_format(trainer.checkpoint_format),
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
