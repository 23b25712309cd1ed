"""``run_experiment``: config -> Trainer, CheckpointManager, Controller -> mode.

A custom launch script is ``parse_configuration -> get_task -> run_experiment`` (see
``examples/custom_launch_script.py``); ``run_experiment`` writes ``params.yaml`` itself.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from torch import nn

from torchgarden.checkpoint import CheckpointMismatchError, latest_checkpoint, read_meta
from torchgarden.config import ConfigError, ExperimentConfig
from torchgarden.core import Task, Trainer
from torchgarden.loop import Controller
from torchgarden.modes import check_mode
from torchgarden.runtime import RuntimeContext
from torchgarden.runtime.preemption import PreemptionWatcher
from torchgarden.summary import SummaryManagerInterface
from torchgarden.train_lib.builders import create_trainer
from torchgarden.train_lib.wiring import (
    ConfigWriter,
    build_checkpoint_manager,
    build_controller,
    build_export_callback,
    build_preemption_watcher,
    build_recovery_action,
)
from torchgarden.utils.logs import Logs

__all__ = ["check_resume_compatible", "run_experiment"]

_logger = logging.getLogger("torchgarden")

#: Config sections that must equal the checkpoint's to resume from it: what the model is
#: and which task it is. Steps, intervals, data paths and the optimizer may change.
_RESUME_KEYS = ("task._type", "task.model")


def check_resume_compatible(params: ExperimentConfig, model_dir: str | os.PathLike[str]) -> None:
    """Refuses to resume from ``model_dir``'s latest checkpoint under another model/task.

    Raises:
        ConfigError: Listing the differing dotted keys with both values.
    """
    path = latest_checkpoint(os.fspath(model_dir))
    if path is None:
        return
    try:
        saved = read_meta(path).get("config")
    except Exception:  # A corrupt checkpoint is reported (and skipped) by the restore.
        return
    if not saved:
        return
    differences = _config_differences(saved, params.as_dict())
    if differences:
        raise ConfigError(
            f"cannot resume {path} under a different model or task ("
            + "; ".join(differences[:5])
            + (f"; and {len(differences) - 5} more" if len(differences) > 5 else "")
            + "). Use a new --model_dir, or set task.init_checkpoint to start from its weights."
        )


def _config_differences(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
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
    return differences


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
) -> tuple[nn.Module, Logs]:
    """Runs ``mode`` for ``task`` and returns ``(model, eval_logs)``.

    Modes: ``train``, ``eval``, ``train_and_eval``, ``continuous_eval``,
    ``train_and_post_eval`` and ``continuous_train_and_eval`` (train with evaluation at
    every ``validation_interval``, then keep evaluating new checkpoints; here the same as
    ``train_and_eval`` since training and evaluation share one process).

    The latest checkpoint in ``model_dir`` is restored on start; a fresh ``model_dir``
    runs ``task.initialize`` (``init_checkpoint``) instead. Modes that train write the
    resolved config to ``model_dir/params.yaml`` once training has started.

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

    Returns:
        ``(model, eval_logs)`` where ``eval_logs`` is ``{}`` unless the mode or
        ``run_post_eval`` evaluates at the end.
    """
    check_mode(mode)
    if model_dir is None:
        raise ValueError("model_dir must be specified, but got None")
    model_dir = os.fspath(model_dir)
    training = "train" in mode
    if trainer is None:
        trainer = create_trainer(
            params, task, train=training, evaluate="eval" in mode or run_post_eval,
            model_dir=model_dir, runtime=runtime,
        )
    callbacks = list(callbacks)
    # Callback state (early-stopping counters, best values) resumes with the run.
    for index, callback in enumerate(callbacks):
        if hasattr(callback, "state_dict") and hasattr(callback, "load_state_dict"):
            trainer.checkpoint.add(**{f"callback_{index}_{type(callback).__name__}": callback})
    if training and trainer.runtime.is_chief:
        callbacks.append(ConfigWriter(params, model_dir))
    export_callback = build_export_callback(params, trainer, model_dir) if training else None
    if export_callback is not None:  # trainer.export_on_best
        callbacks.append(export_callback)
    check_resume_compatible(params, model_dir)
    checkpoint_manager = build_checkpoint_manager(params, trainer, model_dir)
    actions = list(train_actions or [])
    recovery = build_recovery_action(params, trainer, checkpoint_manager) if training else None
    if recovery is not None:
        actions.append(recovery)
    preemption = build_preemption_watcher(params) if training else None
    trainer.preemption = preemption
    try:  # The Controller restores the latest checkpoint (or initialises) right away.
        controller = build_controller(
            params, trainer, mode=mode, model_dir=model_dir,
            checkpoint_manager=checkpoint_manager, save_summary=save_summary,
            summary_manager=summary_manager, eval_summary_manager=eval_summary_manager,
            callbacks=callbacks, train_actions=actions, eval_actions=list(eval_actions or []),
            preemption=preemption,
        )
    except CheckpointMismatchError as e:
        raise _mismatch_error(e, checkpoint_manager.latest_checkpoint) from e
    with _signals_watched(preemption, trainer):
        eval_logs = _run_mode(controller, trainer, params, mode)
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
        f"{error} It cannot be resumed under this config: use a new model_dir (with "
        f"task.init_checkpoint={latest} to start from its weights) or the config it was "
        "written with."
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
