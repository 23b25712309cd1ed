"""Running an experiment: config -> Trainer, CheckpointManager, Controller -> mode.

This is the one place where configs become objects (REFERENCE §5). A custom launch
script is ``parse_configuration -> get_task -> run_experiment`` (see
``examples/custom_launch_script.py``).
"""

from __future__ import annotations

import difflib
import logging
import os
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import nn

    from torchgarden.config import ExperimentConfig
    from torchgarden.core.task import Task
    from torchgarden.core.trainer import Trainer
    from torchgarden.loop.controller import Controller
    from torchgarden.runtime import RuntimeContext
    from torchgarden.summary import SummaryManagerInterface

__all__ = [
    "MODES",
    "run_experiment",
    "create_trainer",
    "maybe_create_best_ckpt_exporter",
    "serialize_config",
    "check_mode",
    "check_resume_compatible",
]

_logger = logging.getLogger("torchgarden")

MODES = (
    "train",
    "eval",
    "train_and_eval",
    "continuous_eval",
    "train_and_post_eval",
    "continuous_train_and_eval",
)


def check_mode(mode: str) -> str:
    """Returns ``mode`` if valid, else raises ``ValueError`` naming the closest mode."""
    if mode in MODES:
        return mode
    close = difflib.get_close_matches(str(mode), MODES, n=1)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    raise ValueError(f"unknown mode '{mode}'; expected one of {', '.join(MODES)}.{hint}")


def serialize_config(params: ExperimentConfig, model_dir: str | os.PathLike[str]) -> str:
    """Writes ``params`` to ``model_dir/params.yaml`` atomically and returns the path.

    Reading the file back with ``type(params).from_yaml`` gives an equal config.
    """
    os.makedirs(model_dir, exist_ok=True)
    path = os.path.join(os.fspath(model_dir), "params.yaml")
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(params.to_yaml())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


#: Config sections that must equal the checkpoint's to resume from it: what the model is
#: and which task it is. Steps, intervals, data paths and the optimizer may change.
_RESUME_KEYS = ("task._type", "task.model")


def check_resume_compatible(params: ExperimentConfig, model_dir: str | os.PathLike[str]) -> None:
    """Refuses to resume from ``model_dir``'s latest checkpoint under another model/task.

    Raises:
        ConfigError: Listing the differing dotted keys with both values.
    """
    from torchgarden.checkpoint import latest_checkpoint, read_meta
    from torchgarden.config import ConfigError

    path = latest_checkpoint(os.fspath(model_dir))
    if path is None:
        return
    try:
        saved = read_meta(path).get("config")
    except Exception:  # A corrupt checkpoint is reported (and skipped) by the restore.
        return
    if not saved:
        return
    current = params.as_dict()
    differences = []
    for key in _RESUME_KEYS:
        section, _, name = key.partition(".")
        old = (saved.get(section) or {}).get(name)
        new = (current.get(section) or {}).get(name)
        if name == "model":
            old, new = old or {}, new or {}
            for field in sorted(set(old) | set(new)):
                if old.get(field) != new.get(field):
                    differences.append(f"{key}.{field}: {old.get(field)!r} -> {new.get(field)!r}")
        elif old != new:
            differences.append(f"{key}: {old!r} -> {new!r}")
    if differences:
        raise ConfigError(
            f"cannot resume {path} under a different model or task ("
            + "; ".join(differences[:5])
            + (f"; and {len(differences) - 5} more" if len(differences) > 5 else "")
            + "). Use a new --model_dir, or set task.init_checkpoint to start from its weights."
        )


def maybe_create_best_ckpt_exporter(params: ExperimentConfig, model_dir: str | None) -> Any:
    """A ``BestCheckpointExporter`` when ``best_checkpoint_export_subdir`` and
    ``best_checkpoint_eval_metric`` are both set, else None (REFERENCE §3.4)."""
    trainer = params.trainer
    subdir, metric = trainer.best_checkpoint_export_subdir, trainer.best_checkpoint_eval_metric
    if not (model_dir and subdir and metric):
        return None
    from torchgarden.checkpoint import BestCheckpointExporter

    return BestCheckpointExporter(
        os.path.join(model_dir, subdir), metric, trainer.best_checkpoint_metric_comp
    )


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
    """Builds the model, optimizer and ``Trainer`` for ``task`` (``train_utils.create_trainer``).

    Args:
        params: The experiment config.
        task: The task (from ``get_task``).
        train: Whether the trainer trains (builds train data and metrics).
        evaluate: Whether it evaluates.
        model_dir: Used for the best-checkpoint exporter.
        runtime: The process' runtime context; default: ``setup_runtime(params.runtime)``.
        trainer_cls: A ``Trainer`` subclass to build instead of ``Trainer``.
    """
    from torchgarden.core.trainer import Trainer
    from torchgarden.runtime import setup_runtime

    runtime = runtime or setup_runtime(params.runtime)
    model = task.build_model()
    model.to(runtime.device)
    optimizer = (
        task.create_optimizer(params.trainer.optimizer_config, model, params.runtime)
        if train
        else None
    )
    return (trainer_cls or Trainer)(
        config=params,
        task=task,
        model=model,
        optimizer=optimizer,
        train=train,
        evaluate=evaluate,
        checkpoint_exporter=maybe_create_best_ckpt_exporter(params, model_dir),
        runtime=runtime,
    )


def _build_checkpoint_manager(
    params: ExperimentConfig, trainer: Trainer, model_dir: str, enable_async: bool
) -> Any:
    from torchgarden.checkpoint import CheckpointManager

    manager = CheckpointManager(
        trainer.checkpoint,
        model_dir,
        max_to_keep=params.trainer.max_to_keep,
        checkpoint_interval=params.trainer.checkpoint_interval,
        init_fn=trainer.initialize,
        enable_async=enable_async,
        config=params.as_dict(),
    )
    # Every rank restores; only rank 0 writes (the manager knows the process group, and
    # with FSDP2 every rank takes part in gathering the state for rank 0 to write).
    return manager


def _build_controller(
    params: ExperimentConfig,
    trainer: Trainer,
    *,
    mode: str,
    model_dir: str,
    checkpoint_manager: Any,
    save_summary: bool,
    summary_manager: SummaryManagerInterface | None,
    eval_summary_manager: SummaryManagerInterface | None,
    callbacks: Sequence[Any],
    train_actions: Sequence[Any],
    eval_actions: Sequence[Any],
    preemption: Any = None,
) -> Controller:
    from torchgarden.loop.controller import Controller
    from torchgarden.summary import SummaryManager

    cfg = params.trainer
    chief = trainer.runtime.is_chief
    write = save_summary and chief
    train_dir = os.path.join(model_dir, "train") if write else None
    eval_dir = os.path.join(model_dir, cfg.validation_summary_subdir) if write else None
    if not write:
        summary_manager = SummaryManager(None)
        eval_summary_manager = SummaryManager(None)
    elif eval_summary_manager is None and params.task.allow_image_summary:
        from torchgarden.summary import ImageScalarSummaryManager

        eval_summary_manager = ImageScalarSummaryManager(
            eval_dir, global_step=lambda: int(trainer.global_step)
        )
    training = "train" in mode
    return Controller(
        global_step=trainer.global_step,
        trainer=trainer if training else None,
        evaluator=trainer,
        steps_per_loop=cfg.steps_per_loop if training else None,
        checkpoint_manager=checkpoint_manager,
        summary_interval=cfg.summary_interval if (training and write) else None,
        summary_dir=train_dir,
        eval_summary_dir=eval_dir,
        summary_manager=summary_manager,
        eval_summary_manager=eval_summary_manager,
        train_actions=train_actions,
        eval_actions=eval_actions,
        callbacks=callbacks,
        progress_bar=cfg.progress_bar if chief else False,
        print_logs=chief,
        preemption=preemption,
    )


def run_experiment(
    *,
    task: Task,
    mode: str,
    params: ExperimentConfig,
    model_dir: str | os.PathLike[str] | None,
    trainer: Trainer | None = None,
    run_post_eval: bool = False,
    save_summary: bool = True,
    summary_manager: SummaryManagerInterface | None = None,
    eval_summary_manager: SummaryManagerInterface | None = None,
    callbacks: Iterable[Any] = (),
    train_actions: Sequence[Any] | None = None,
    eval_actions: Sequence[Any] | None = None,
    runtime: RuntimeContext | None = None,
) -> tuple[nn.Module, dict[str, Any]]:
    """Runs ``mode`` for ``task`` and returns ``(model, eval_logs)``.

    Modes: ``train``, ``eval``, ``train_and_eval``, ``continuous_eval``,
    ``train_and_post_eval`` and ``continuous_train_and_eval`` (train with evaluation at
    every ``validation_interval``, then keep evaluating new checkpoints; here the same as
    ``train_and_eval`` since training and evaluation share one process).

    The latest checkpoint in ``model_dir`` is restored on start; a fresh ``model_dir``
    runs ``task.initialize`` (``init_checkpoint``) instead.

    Args:
        task: The task to run.
        mode: One of ``MODES``.
        params: The experiment config (validated).
        model_dir: Where checkpoints and summaries go. Required.
        trainer: A ready ``Trainer`` (e.g. a custom subclass); default built from params.
        run_post_eval: Run one more full evaluation at the end and return its logs.
        save_summary: Write TensorBoard summaries under ``model_dir/{train,validation}``.
        summary_manager: Custom train summary manager.
        eval_summary_manager: Custom eval summary manager.
        callbacks: ``callbacks.Callback`` objects.
        train_actions: Orbit-style callables run with each train loop's logs.
        eval_actions: Callables run with each evaluation's logs.
        runtime: The process' runtime context; default ``setup_runtime(params.runtime)``.

    Returns:
        ``(model, eval_logs)`` where ``eval_logs`` is ``{}`` unless the mode or
        ``run_post_eval`` evaluates at the end.
    """
    check_mode(mode)
    if model_dir is None:
        raise ValueError("model_dir must be specified, but got None")
    model_dir = os.fspath(model_dir)
    if trainer is None:
        trainer = create_trainer(
            params,
            task,
            train="train" in mode,
            evaluate="eval" in mode or run_post_eval,
            model_dir=model_dir,
            runtime=runtime,
        )
    callbacks = list(callbacks)
    # Callback state (early-stopping counters, best values) resumes with the run.
    for index, callback in enumerate(callbacks):
        if hasattr(callback, "state_dict") and hasattr(callback, "load_state_dict"):
            trainer.checkpoint.add(**{f"callback_{index}_{type(callback).__name__}": callback})
    check_resume_compatible(params, model_dir)
    enable_async = bool(getattr(params.trainer, "enable_async_checkpointing", False))
    checkpoint_manager = _build_checkpoint_manager(params, trainer, model_dir, enable_async)

    actions = list(train_actions or [])
    if "train" in mode:
        from torchgarden.callbacks import RecoveryAction

        if params.trainer.recovery_max_trials >= 0:
            actions.append(
                RecoveryAction(
                    checkpoint_manager=checkpoint_manager,
                    loss_upper_bound=params.trainer.loss_upper_bound,
                    recovery_begin_steps=params.trainer.recovery_begin_steps,
                    max_trials=params.trainer.recovery_max_trials,
                    global_step=trainer.global_step,
                )
            )
    preemption = None
    if "train" in mode and params.trainer.preemption_on_demand_checkpoint:
        import threading

        from torchgarden.runtime.preemption import PreemptionWatcher, parse_signals

        if threading.current_thread() is threading.main_thread():
            preemption = PreemptionWatcher(parse_signals(params.trainer.preemption_signals))
            trainer.preemption = preemption
    from torchgarden.checkpoint import CheckpointMismatchError

    try:  # The Controller restores the latest checkpoint (or initialises) right away.
        controller = _build_controller(
            params,
            trainer,
            mode=mode,
            model_dir=model_dir,
            checkpoint_manager=checkpoint_manager,
            save_summary=save_summary,
            summary_manager=summary_manager,
            eval_summary_manager=eval_summary_manager,
            callbacks=callbacks,
            train_actions=actions,
            eval_actions=list(eval_actions or []),
            preemption=preemption,
        )
    except CheckpointMismatchError as e:
        latest = checkpoint_manager.latest_checkpoint
        if latest is None:  # From task.init_checkpoint, whose message says what to fix.
            raise
        raise CheckpointMismatchError(
            f"{e} It cannot be resumed under this config: use a new model_dir (with "
            f"task.init_checkpoint={latest} to start from its weights) or the config it was "
            "written with."
        ) from e

    if preemption is not None:
        preemption.install()
    try:
        eval_logs = _run_mode(controller, trainer, params, mode)
    finally:
        if preemption is not None:
            preemption.uninstall()
            trainer.preemption = None
    num_params = sum(p.numel() for p in trainer.unwrapped_model.parameters())
    _logger.info("Number of parameters in model: %.6f Millions.", num_params / 1e6)

    # Unlike Model Garden, train_and_eval's final in-loop evaluation (at train_steps) is
    # reused as the post-eval result instead of evaluating the same weights twice.
    reuse_final_eval = mode in ("train_and_eval", "continuous_train_and_eval") and eval_logs
    if (run_post_eval or mode == "train_and_post_eval") and not reuse_final_eval:
        eval_logs = controller.evaluate(steps=params.trainer.validation_steps)
    for callback in callbacks:
        on_end = getattr(callback, "on_experiment_end", None)
        if on_end is not None:
            on_end(eval_logs)
    return trainer.unwrapped_model, eval_logs


def _run_mode(
    controller: Controller, trainer: Trainer, params: ExperimentConfig, mode: str
) -> dict[str, Any]:
    cfg = params.trainer
    eval_logs: dict[str, Any] = {}
    if mode in ("train", "train_and_post_eval"):
        controller.train(steps=cfg.train_steps)
    elif mode in ("train_and_eval", "continuous_train_and_eval"):
        eval_logs = controller.train_and_evaluate(
            train_steps=cfg.train_steps,
            eval_steps=cfg.validation_steps,
            eval_interval=cfg.validation_interval,
        )
    elif mode == "eval":
        eval_logs = controller.evaluate(steps=cfg.validation_steps)
    elif mode == "continuous_eval":
        train_steps = cfg.train_steps

        def timeout_fn() -> bool:
            return int(trainer.global_step) >= train_steps

        eval_logs = controller.evaluate_continuously(
            steps=cfg.validation_steps, timeout=cfg.continuous_eval_timeout, timeout_fn=timeout_fn
        )
    return eval_logs
