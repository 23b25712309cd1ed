"""``run_experiment``: config -> Trainer, CheckpointManager, Controller -> mode.

A custom launch script is ``parse_configuration -> get_task -> run_experiment`` (see
``examples/custom_launch_script.py``); ``run_experiment`` writes ``params.yaml`` itself.

Before anything is written, a run checks what it can: the model_dir's layout, the data
(built with the trainer), the checkpoint it will resume (verified, same task and model),
the best-checkpoint metric; then it takes the model_dir's lock (training modes) or the
``eval/`` lock (evaluation modes) and writes only after that.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from torch import nn

from torchgarden.checkpoint import CheckpointManager, CheckpointMismatchError
from torchgarden.config import ExperimentConfig
from torchgarden.config.multitask import MultiEvalExperimentConfig
from torchgarden.core import Task, Trainer
from torchgarden.loop import Controller
from torchgarden.modes import check_mode
from torchgarden.multitask import MultiTask
from torchgarden.runtime import RuntimeContext, seed_host_rngs, setup_runtime
from torchgarden.runtime.preemption import PreemptionWatcher
from torchgarden.summary import SummaryManagerInterface
from torchgarden.train_lib.builders import create_trainer
from torchgarden.train_lib.model_dir import check_model_dir, eval_dir
from torchgarden.train_lib.multitask import create_evaluator, create_multitask_trainer
from torchgarden.train_lib.recovery import build_recovery_action
from torchgarden.train_lib.resume import (
    ConfiguredOptimizer,
    check_best_metric,
    check_resume_compatible,
)
from torchgarden.train_lib.run_lock import run_lock
from torchgarden.train_lib.wiring import (
    ConfigWriter,
    build_checkpoint_manager,
    build_controller,
    build_export_callback,
    build_preemption_watcher,
)
from torchgarden.utils.logs import Logs

__all__ = ["check_resume_compatible", "run_experiment", "run_experiment_with_multitask_eval"]

_logger = logging.getLogger("torchgarden")


class NoCheckpointError(ValueError):
    """``eval`` was asked of a model_dir that holds no checkpoint."""


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
    evaluator: Any = None,
) -> tuple[nn.Module, Logs]:
    """Runs ``mode`` for ``task`` and returns ``(model, eval_logs)``.

    Modes: ``train``, ``eval``, ``train_and_eval``, ``continuous_eval``,
    ``train_and_post_eval`` and ``continuous_train_and_eval`` (train with evaluation at
    every ``validation_interval``, then keep evaluating new checkpoints; here the same as
    ``train_and_eval`` since training and evaluation share one process).

    The newest checkpoint of ``model_dir`` that verifies (and holds finite weights) is
    restored on start; a fresh ``model_dir`` runs ``task.initialize`` (``init_checkpoint``)
    instead. Modes that train hold ``model_dir``'s lock (one writer per model_dir) and
    write the resolved config to ``model_dir/params.yaml`` once training has started.
    ``eval`` and ``continuous_eval`` never write where a trainer writes: their summaries
    and best-checkpoint export go to ``model_dir/eval/``; ``eval`` needs a checkpoint
    (or ``task.init_checkpoint``).

    A ``MultiTask`` (``MultiTaskConfig``) trains with the joint or interleaving trainer
    and evaluates each task into ``validation/<task>/``; a ``MultiEvalExperimentConfig``
    trains ``task`` and evaluates each of its ``eval_tasks`` (docs/multitask.md).

    Args:
        task: The task to run.
        mode: One of ``torchgarden.modes.MODES``.
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
        evaluator: What evaluates (``evaluate(num_steps) -> logs``), e.g. a
            ``multitask.MultiTaskEvaluator``; default the trainer, or the multi-task
            evaluator of a multi-task run or ``MultiEvalExperimentConfig``.

    Returns:
        ``(model, eval_logs)`` where ``eval_logs`` is ``{}`` unless the mode or
        ``run_post_eval`` evaluates at the end.

    Raises:
        ModelDirLockedError: Another process trains in ``model_dir`` (or evaluates into
            its ``eval/``).
        NoCheckpointError: ``eval`` on a model_dir without a checkpoint.
    """
    check_mode(mode)
    if model_dir is None:
        raise ValueError("model_dir must be specified, but got None")
    model_dir = os.fspath(model_dir)
    training = "train" in mode
    check_model_dir(model_dir, params, training=training)
    if runtime is None:
        runtime = trainer.runtime if trainer is not None else setup_runtime(params.runtime)
    evaluating = "eval" in mode or run_post_eval
    if trainer is None and isinstance(task, MultiTask):
        trainer = create_multitask_trainer(params, task, train=training, runtime=runtime)
    elif trainer is None:
        trainer = create_trainer(
            params, task, train=training, model_dir=model_dir, runtime=runtime,
            evaluate=evaluating and not isinstance(params, MultiEvalExperimentConfig),
        )
    if evaluator is None:
        evaluator = create_evaluator(params, task, trainer, evaluate=evaluating,
                                     model_dir=model_dir)
    checkpoint_manager = build_checkpoint_manager(params, trainer, model_dir)
    resumed = checkpoint_manager.prepare_restore()
    if mode == "eval" and resumed is None and not params.task.init_checkpoint:
        raise NoCheckpointError(
            f"--model_dir {model_dir} holds no checkpoint (ckpt-<step>/) to evaluate; train "
            "first, point --model_dir at a trained run, or set task.init_checkpoint."
        )
    if training:
        check_resume_compatible(params, model_dir, checkpoint=resumed)
        if evaluating or not isinstance(params, MultiEvalExperimentConfig):
            check_best_metric(params, task, evaluator)  # (Its eval tasks run only then.)
        if trainer.optimizer is not None and "optimizer" in trainer.checkpoint:
            trainer.checkpoint.add(
                optimizer=ConfiguredOptimizer(trainer.optimizer, trainer.checkpoint["optimizer"])
            )
    lock_dir = model_dir if training else eval_dir(model_dir)
    with _lock(lock_dir, "train" if training else "eval", runtime.is_chief and (
        training or save_summary or evaluator.checkpoint_exporter is not None
    )):
        return _run(
            task=task, mode=mode, params=params, model_dir=model_dir, trainer=trainer,
            evaluator=evaluator, checkpoint_manager=checkpoint_manager, fresh=resumed is None,
            run_post_eval=run_post_eval, save_summary=save_summary,
            summary_manager=summary_manager, eval_summary_manager=eval_summary_manager,
            callbacks=list(callbacks), train_actions=list(train_actions or []),
            eval_actions=list(eval_actions or []),
        )


def run_experiment_with_multitask_eval(
    *,
    train_task: Task,
    eval_tasks: Mapping[str, Task] | Sequence[Task],
    mode: str,
    params: ExperimentConfig,
    model_dir: str | os.PathLike[str],
    eval_steps: Mapping[str, int | None] | None = None,
    trainer: Trainer | None = None,
    runtime: RuntimeContext | None = None,
    **kwargs: Any,
) -> tuple[nn.Module, Logs]:
    """Trains ``train_task`` and evaluates its model with each of ``eval_tasks``.

    Model Garden's ``multitask.train_lib.run_experiment_with_multitask_eval``: every
    evaluation runs each eval task's ``validation_step`` and metrics on the trained model,
    into ``validation/<task name>/``; ``best_checkpoint_eval_metric`` may name any of
    them (``"noisy/accuracy"``). A ``MultiEvalExperimentConfig`` does the same through
    ``run_experiment`` (and the CLI).

    Args:
        train_task: The task that trains.
        eval_tasks: The evaluation tasks by name (a sequence is keyed by ``task.name``).
        mode: As for :func:`run_experiment`.
        params: The experiment config.
        model_dir: Where checkpoints and summaries go.
        eval_steps: Eval steps by task name; missing: ``trainer.validation_steps``.
        trainer: A ready ``Trainer``; default built from ``params`` for ``train_task``.
        runtime: The process' runtime context; default ``setup_runtime(params.runtime)``.
        **kwargs: Passed to :func:`run_experiment` (``run_post_eval``, ``save_summary``,
            ``callbacks``, ...).

    Returns:
        ``(model, eval_logs)`` with ``eval_logs`` keyed by eval task name.
    """
    runtime = runtime or (trainer.runtime if trainer is not None else setup_runtime(
        params.runtime))
    trainer = trainer or create_trainer(params, train_task, train="train" in mode,
                                        evaluate=False, model_dir=os.fspath(model_dir),
                                        runtime=runtime)
    tasks = dict(eval_tasks) if isinstance(eval_tasks, Mapping) else (
        {task.name: task for task in eval_tasks})
    evaluator = create_evaluator(params, train_task, trainer, evaluate=True,
                                 model_dir=os.fspath(model_dir), eval_tasks=tasks,
                                 eval_steps=eval_steps)
    return run_experiment(task=train_task, mode=mode, params=params, model_dir=model_dir,
                          trainer=trainer, evaluator=evaluator, runtime=runtime, **kwargs)


@contextlib.contextmanager
def _lock(directory: str, role: str, needed: bool) -> Iterator[None]:
    if not needed:
        yield
        return
    with run_lock(directory, role=role):
        yield


def _run(
    *, task: Task, mode: str, params: ExperimentConfig, model_dir: str, trainer: Trainer,
    evaluator: Any, checkpoint_manager: CheckpointManager, fresh: bool, run_post_eval: bool,
    save_summary: bool, summary_manager: SummaryManagerInterface | None,
    eval_summary_manager: SummaryManagerInterface | None, callbacks: list[Any],
    train_actions: list[Any], eval_actions: list[Any],
) -> tuple[nn.Module, Logs]:
    """``run_experiment`` once the model_dir is checked and locked."""
    training = "train" in mode
    if training and trainer.runtime.is_chief:  # The run lock is held: no other writer.
        checkpoint_manager.remove_leftovers()  # Of a save or delete cut short by a kill.
    # Callback state (early-stopping counters, best values) resumes with the run.
    for index, callback in enumerate(callbacks):
        if hasattr(callback, "state_dict") and hasattr(callback, "load_state_dict"):
            trainer.checkpoint.add(**{f"callback_{index}_{type(callback).__name__}": callback})
    if training and trainer.runtime.is_chief:
        callbacks.append(ConfigWriter(params, model_dir))
    export_callback = build_export_callback(params, evaluator, model_dir) if training else None
    if export_callback is not None:  # trainer.export_on_best
        callbacks.append(export_callback)
    preemption = build_preemption_watcher(params) if training else None
    trainer.preemption = preemption
    if fresh and params.runtime.seed is not None:  # Imports while building drew from them.
        seed_host_rngs(params.runtime.seed)
    try:  # The Controller restores the checkpoint prepared above (or initialises).
        controller = build_controller(
            params, trainer, evaluator=evaluator, mode=mode, model_dir=model_dir,
            checkpoint_manager=checkpoint_manager, save_summary=save_summary,
            summary_manager=summary_manager, eval_summary_manager=eval_summary_manager,
            callbacks=callbacks, train_actions=train_actions, eval_actions=eval_actions,
            preemption=preemption,
        )
    except CheckpointMismatchError as e:
        raise _mismatch_error(e, checkpoint_manager.latest_checkpoint) from e
    recovery = (
        build_recovery_action(params, trainer, checkpoint_manager, fresh_start=fresh,
                              callbacks=controller.callbacks)
        if training else None
    )
    if recovery is not None:
        controller.train_actions.append(recovery)
    try:
        with _signals_watched(preemption, trainer):
            eval_logs = _run_mode(controller, trainer, params, mode)
    finally:
        trainer.close()  # Loader workers end now, not whenever the collector runs.
        checkpoint_manager.close()  # Its writer thread and (DCP) gloo group too.
    num_params = sum(p.numel() for p in trainer.unwrapped_model.parameters())
    _logger.info("Number of parameters in model: %.6f Millions.", num_params / 1e6)
    # Unlike Model Garden, train_and_eval's final in-loop evaluation (at train_steps) is
    # reused as the post-eval result instead of evaluating the same weights twice.
    reuse_final_eval = mode in ("train_and_eval", "continuous_train_and_eval") and eval_logs
    if (run_post_eval or mode == "train_and_post_eval") and not reuse_final_eval:
        eval_logs = controller.evaluate(steps=params.trainer.validation_steps)
    for callback in controller.callbacks:  # The given ones and those wiring added.
        on_end = getattr(callback, "on_experiment_end", None)
        if on_end is not None:
            on_end(eval_logs)
    return trainer.unwrapped_model, eval_logs


def _mismatch_error(error: CheckpointMismatchError, latest: str | None) -> Exception:
    if latest is None:  # From task.init_checkpoint, whose message says what to fix.
        return error
    return CheckpointMismatchError(
        f"{str(error).rstrip('. ')}. It cannot be resumed under this config: use a new "
        f"model_dir (with task.init_checkpoint={latest} to start from its weights) or the "
        "config it was written with."
    )


@contextlib.contextmanager
def _signals_watched(preemption: PreemptionWatcher | None, trainer: Trainer) -> Iterator[None]:
    if preemption is None:
        yield
        return
    preemption.install()
    try:
        yield
    finally:
        preemption.uninstall()
        trainer.preemption = None


def _run_mode(
    controller: Controller, trainer: Trainer, params: ExperimentConfig, mode: str
) -> Logs:
    cfg = params.trainer
    if mode in ("train", "train_and_post_eval"):
        controller.train(steps=cfg.train_steps)
        return {}
    if mode in ("train_and_eval", "continuous_train_and_eval"):
        return controller.train_and_evaluate(
            train_steps=cfg.train_steps,
            eval_steps=cfg.validation_steps,
            eval_interval=cfg.validation_interval,
        )
    if mode == "eval":
        return controller.evaluate(steps=cfg.validation_steps)
    # continuous_eval: until a checkpoint at train_steps has been evaluated.
    return controller.evaluate_continuously(
        steps=cfg.validation_steps,
        timeout=cfg.continuous_eval_timeout,
        timeout_fn=lambda: int(trainer.global_step) >= cfg.train_steps,
    )
