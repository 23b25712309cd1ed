"""``run_experiment``: validate -> lock -> build -> restore -> loop -> close.

It is the one guard of a model_dir: the layout is checked and the lock taken (training:
the model_dir's; evaluation jobs: ``eval/``'s) before torch is imported and before
anything is written. Bad input found later (the data, the checkpoint to resume, a model
that does not fit the loss) removes what the run created, unless it saved a checkpoint.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from torchgarden.config import ExperimentConfig
from torchgarden.modes import check_mode
from torchgarden.registry import RegistryError
from torchgarden.runtime.strategy import chief_of, resolve_strategy
from torchgarden.train_lib.model_dir import (
    EVAL_SUBDIR,
    NoCheckpointError,
    best_export_dir,
    check_model_dir,
    eval_dir,
)
from torchgarden.train_lib.run_lock import ModelDirLockedError, RunLock

if TYPE_CHECKING:
    from torch import nn

    from torchgarden.core import Task, Trainer
    from torchgarden.loop import Controller
    from torchgarden.runtime import RuntimeContext
    from torchgarden.summary import SummaryManagerInterface
    from torchgarden.utils.logs import Logs

__all__ = [
    "NoCheckpointError",
    "bad_input_errors",
    "run_experiment",
    "run_experiment_with_multitask_eval",
]

_logger = logging.getLogger("torchgarden")


def run_experiment(
    *, task: Task | None = None, mode: str, params: ExperimentConfig,
    model_dir: str | os.PathLike[str] | None, trainer: Trainer | None = None,
    run_post_eval: bool = False, save_summary: bool = True,
    summary_manager: SummaryManagerInterface | None = None,
    eval_summary_manager: SummaryManagerInterface | None = None,
    callbacks: Iterable[Any] = (), train_actions: Sequence[Any] | None = None,
    eval_actions: Sequence[Any] | None = None, runtime: RuntimeContext | None = None,
    evaluator: Any = None,
) -> tuple[nn.Module, Logs]:
    """Runs ``mode`` (``torchgarden.modes.MODES``); returns ``(model, eval_logs)``, the
    logs ``{}`` unless the mode or ``run_post_eval`` evaluates at the end.

    It resumes the newest checkpoint that verifies (finite weights, same task and model),
    or runs ``task.initialize``. Evaluation jobs write only under ``model_dir/eval/``.

    Args:
        task: Default ``get_task(params.task)``, built once the lock is held.
        trainer: A ready ``Trainer`` (e.g. a subclass); default built from ``params``.
        run_post_eval: Evaluate once more at the end.
        save_summary: Write summaries under ``model_dir/{train,validation}``.
        summary_manager, eval_summary_manager: Replace the default train/eval managers.
        callbacks, train_actions, eval_actions: ``Callback`` objects; Orbit-style
            callables run with each train loop's / evaluation's logs.
        runtime: Default ``setup_runtime(params.runtime)``, torn down at the end.
        evaluator: Default the trainer (multi-task runs: a ``MultiTaskEvaluator``).

    Raises:
        ModelDirLockedError: Another process writes where this run would.
        NoCheckpointError: ``eval`` of a model_dir without a checkpoint.
    """
    # Validate: nothing is written, and torch is not imported, before the lock is held.
    check_mode(mode)
    training = "train" in mode
    model_dir = check_model_dir(model_dir, params, training=training)
    runtime = runtime or (trainer.runtime if trainer is not None else None)
    # Lock: one trainer per model_dir; an evaluation job writes only under eval/.
    with _guarded(model_dir, params, runtime, training=training, save_summary=save_summary):
        from torchgarden.runtime import setup_runtime, teardown_runtime  # Torch from here on.
        from torchgarden.train_lib import wiring
        from torchgarden.utils import startup
        owned, runtime = runtime is None, runtime or setup_runtime(params.runtime)
        startup.mark_imports()
        try:
            # Build: task, trainer, evaluator, checkpoint manager; closed after the block.
            with wiring.build_run(params, mode=mode, model_dir=model_dir, task=task,
                                  trainer=trainer, evaluator=evaluator, runtime=runtime,
                                  run_post_eval=run_post_eval) as run:
                # Restore: the Controller applies the checkpoint found, or initialises.
                controller = wiring.build_controller(
                    run, params, mode=mode, save_summary=save_summary, callbacks=callbacks,
                    summary_manager=summary_manager, eval_summary_manager=eval_summary_manager,
                    train_actions=train_actions or (), eval_actions=eval_actions or ())
                # Loop.
                with run.signals_watched():
                    eval_logs = _run_mode(controller, run.trainer, params, mode)
            # Closed: loader workers, the checkpoint writer thread (and DCP's gloo group).
            eval_logs = _finish(controller, run.trainer, params, mode, eval_logs, run_post_eval)
            return run.trainer.unwrapped_model, eval_logs
        finally:
            if owned:  # Its process group, if it made one.
                teardown_runtime(runtime)


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
    """Trains ``train_task`` and evaluates its model with each of ``eval_tasks``, into
    ``validation/<task name>/`` (Model Garden's ``run_experiment_with_multitask_eval``);
    ``best_checkpoint_eval_metric`` may name any of them (``"noisy/accuracy"``). A
    ``MultiEvalExperimentConfig`` does the same through ``run_experiment`` and the CLI.

    Args:
        eval_tasks: The evaluation tasks by name (a sequence is keyed by ``task.name``).
        eval_steps: Eval steps by task name; missing: ``trainer.validation_steps``.
        trainer: A ready ``Trainer``; default built from ``params`` for ``train_task``.
        **kwargs: The other arguments of :func:`run_experiment`.

    Returns:
        ``(model, eval_logs)`` with ``eval_logs`` keyed by eval task name.
    """
    from torchgarden.runtime import setup_runtime
    from torchgarden.train_lib.builders import create_trainer
    from torchgarden.train_lib.multitask import create_evaluator

    runtime = runtime or (trainer.runtime if trainer is not None else setup_runtime(
        params.runtime))
    trainer = trainer or create_trainer(
        params, train_task, train="train" in mode, evaluate=False,
        model_dir=os.fspath(model_dir), runtime=runtime)
    tasks = dict(eval_tasks) if isinstance(eval_tasks, Mapping) else (
        {task.name: task for task in eval_tasks})
    evaluator = create_evaluator(params, train_task, trainer, evaluate=True,
                                 model_dir=os.fspath(model_dir), eval_tasks=tasks,
                                 eval_steps=eval_steps)
    return run_experiment(task=train_task, mode=mode, params=params, model_dir=model_dir,
                          trainer=trainer, evaluator=evaluator, runtime=runtime, **kwargs)


@contextlib.contextmanager
def _guarded(model_dir: str, params: ExperimentConfig, runtime: RuntimeContext | None, *,
             training: bool, save_summary: bool) -> Iterator[None]:
    """Holds the lock of where the run writes (the chief's, when it writes at all); on bad
    input (or Ctrl-C) before a training run's first checkpoint, removes what the run
    created there (``eval/`` is kept)."""
    chief = runtime.is_chief if runtime is not None else chief_of(resolve_strategy(params.runtime))
    if not (chief and (training or save_summary or best_export_dir(params, model_dir))):
        yield
        return
    with RunLock(model_dir if training else eval_dir(model_dir),
                 role="train" if training else "eval") as lock:
        try:
            yield
        except (*bad_input_errors(), KeyboardInterrupt):
            if not _new_checkpoints(lock):  # An evaluation job leaves what it wrote.
                lock.remove_created(keep=(EVAL_SUBDIR,) if training else None)
            raise


def bad_input_errors() -> tuple[type[BaseException], ...]:
    """What counts as bad input (a config, a flag, the data, a checkpoint, a model_dir in
    use) rather than a bug: the CLI reports it in one line (exit 2), and a training run
    that meets it before its first checkpoint removes what it created. Checkpoint errors
    count once their module is loaded (it imports torch); a divergence does not count
    (its run keeps its summaries for the diagnosis)."""
    errors: list[type[BaseException]] = [
        ValueError, KeyError, RegistryError, OSError, TypeError, ImportError,
        ModelDirLockedError]
    checkpoint = sys.modules.get("torchgarden.checkpoint.errors")
    if checkpoint is not None:
        errors.append(checkpoint.CheckpointError)
    return tuple(errors)


def _new_checkpoints(lock: RunLock) -> bool:
    try:
        return any(name.startswith("ckpt-") and name not in lock.preexisting
                   for name in os.listdir(lock.directory))
    except OSError:
        return False


def _run_mode(controller: Controller, trainer: Trainer, params: ExperimentConfig,
              mode: str) -> Logs:
    cfg = params.trainer
    if mode in ("train", "train_and_post_eval"):
        controller.train(steps=cfg.train_steps)
        return {}
    if mode in ("train_and_eval", "continuous_train_and_eval"):  # One process: the same.
        return controller.train_and_evaluate(
            train_steps=cfg.train_steps, eval_steps=cfg.validation_steps,
            eval_interval=cfg.validation_interval)
    if mode == "eval":
        return controller.evaluate(steps=cfg.validation_steps)
    # continuous_eval: until a checkpoint at train_steps has been evaluated.
    if controller.print_logs:
        print(_continuous_eval_plan(controller.checkpoint_manager.directory, cfg), flush=True)
    return controller.evaluate_continuously(
        steps=cfg.validation_steps, timeout=cfg.continuous_eval_timeout,
        timeout_fn=lambda: int(trainer.global_step) >= cfg.train_steps)


def _continuous_eval_plan(directory: str, cfg: Any) -> str:
    """What ``continuous_eval`` waits for and when it stops (Model Garden's rule), said once."""
    from torchgarden.checkpoint import latest_checkpoint

    latest = latest_checkpoint(directory)
    seen = f"newest now: {os.path.basename(latest)}" if latest else "none there yet"
    return (f"torchgarden: continuous_eval: evaluating each new checkpoint in {directory} as "
            f"it appears ({seen}); it stops once a checkpoint at trainer.train_steps="
            f"{cfg.train_steps} was evaluated and no newer one came for trainer."
            f"continuous_eval_timeout={cfg.continuous_eval_timeout} s. Until then it keeps "
            "waiting, as Model Garden does (Ctrl-C stops it).")


def _finish(controller: Controller, trainer: Trainer, params: ExperimentConfig, mode: str,
            eval_logs: Logs, run_post_eval: bool) -> Logs:
    """The post-training evaluation, then every callback's ``on_experiment_end``."""
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
    return eval_logs
