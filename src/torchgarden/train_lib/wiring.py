"""Configs become objects here too: the run's parts, its checkpoint manager, the Controller.

``run_experiment`` calls :func:`build_run` (trainer, evaluator, checkpoint manager, the
checkpoint to resume) and :func:`build_controller` (callbacks, recovery, summaries: the
Controller, which restores). The Controller never sees a config; these
builders read ``trainer`` settings and hand it built objects.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from torchgarden.callbacks import ExportOnBest, RecoveryAction
from torchgarden.checkpoint import CheckpointManager, CheckpointMismatchError
from torchgarden.compile.cache import use_compile_cache
from torchgarden.config import ExperimentConfig
from torchgarden.config.multitask import MultiEvalExperimentConfig
from torchgarden.core import Task, Trainer
from torchgarden.loop import Controller
from torchgarden.multitask import MultiTask
from torchgarden.registry import get_task
from torchgarden.runtime import RuntimeContext, seed_host_rngs
from torchgarden.runtime.preemption import PreemptionWatcher, parse_signals
from torchgarden.summary import SummaryManagerInterface
from torchgarden.train_lib.builders import create_trainer
from torchgarden.train_lib.model_dir import COMPILE_CACHE_SUBDIR, NoCheckpointError
from torchgarden.train_lib.multitask import create_evaluator, create_multitask_trainer
from torchgarden.train_lib.observability import build_observers
from torchgarden.train_lib.recovery import build_recovery
from torchgarden.train_lib.resume import (
    ConfiguredOptimizer,
    check_best_metric,
    check_resume_compatible,
)
from torchgarden.utils.files import atomic_write_text

__all__ = [
    "ConfigWriter",
    "Run",
    "build_checkpoint_manager",
    "build_controller",
    "build_export_callback",
    "build_preemption_watcher",
    "build_run",
    "serialize_config",
]


@dataclasses.dataclass
class Run:
    """A run's built parts (:func:`build_run`); a context manager that closes them."""

    trainer: Trainer
    evaluator: Any
    checkpoint_manager: CheckpointManager
    model_dir: str
    training: bool
    #: The checkpoint that will be restored, ``(path, meta)``; None on a fresh start.
    resumed: tuple[str, dict[str, Any]] | None
    preemption: PreemptionWatcher | None

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.trainer.close()  # Loader workers end now, not whenever the collector runs.
        self.checkpoint_manager.close()  # Its writer thread and (DCP) gloo group too.

    @contextlib.contextmanager
    def signals_watched(self) -> Iterator[None]:
        """The preemption signals turned into a checkpoint and an exit (training)."""
        if self.preemption is None:
            yield
            return
        self.trainer.preemption = self.preemption
        self.preemption.install()
        try:
            yield
        finally:
            self.preemption.uninstall()
            self.trainer.preemption = None


def build_run(
    params: ExperimentConfig, *, mode: str, model_dir: str, task: Task | None,
    trainer: Trainer | None, evaluator: Any, runtime: RuntimeContext, run_post_eval: bool,
) -> Run:
    """Builds what ``mode`` runs and finds the checkpoint it resumes (checked: it was
    written for this task and model; the best-checkpoint metric names an eval log).

    Raises:
        NoCheckpointError: ``eval`` of a model_dir without a checkpoint or init_checkpoint.
    """
    training, evaluating = "train" in mode, "eval" in mode or run_post_eval
    task = task or get_task(params.task, logging_dir=model_dir)
    multi_eval = isinstance(params, MultiEvalExperimentConfig)
    # A restarted compiled run does not compile again.
    compile_cache = use_compile_cache(os.path.join(model_dir, COMPILE_CACHE_SUBDIR)) if (
        params.runtime.enable_xla and training) else None
    if trainer is None and isinstance(task, MultiTask):
        trainer = create_multitask_trainer(params, task, train=training, runtime=runtime)
    elif trainer is None:
        trainer = create_trainer(params, task, train=training, model_dir=model_dir,
                                 runtime=runtime, evaluate=evaluating and not multi_eval)
    if evaluator is None:
        evaluator = create_evaluator(params, task, trainer, evaluate=evaluating,
                                     model_dir=model_dir)
    if compile_cache is not None and hasattr(trainer.step_fn, "artifacts_dir"):
        trainer.step_fn.artifacts_dir = compile_cache
        trainer.step_fn.save_artifacts = trainer.runtime.is_chief
    manager = build_checkpoint_manager(params, trainer, model_dir)
    resumed = manager.prepare_restore()
    if mode == "eval" and resumed is None and not params.task.init_checkpoint:
        raise NoCheckpointError(
            f"--model_dir {model_dir} holds no checkpoint (ckpt-<step>/) to evaluate; train "
            "first, point --model_dir at a trained run, or set task.init_checkpoint.")
    if training:
        check_resume_compatible(params, model_dir, checkpoint=resumed)
        if evaluating or not multi_eval:
            check_best_metric(params, task, evaluator)  # (Its eval tasks run only then.)
        if trainer.optimizer is not None and "optimizer" in trainer.checkpoint:
            trainer.checkpoint.add(optimizer=ConfiguredOptimizer(
                trainer.optimizer, trainer.checkpoint["optimizer"]))
    return Run(trainer=trainer, evaluator=evaluator, checkpoint_manager=manager,
               model_dir=model_dir, training=training, resumed=resumed,
               preemption=build_preemption_watcher(params) if training else None)


def serialize_config(params: ExperimentConfig, model_dir: str | os.PathLike[str]) -> str:
    """Writes ``params`` to ``model_dir/params.yaml`` atomically and returns the path.

    Reading the file back with ``type(params).from_yaml`` gives an equal config.
    """
    os.makedirs(model_dir, exist_ok=True)
    path = os.path.join(os.fspath(model_dir), "params.yaml")
    atomic_write_text(path, params.to_yaml())
    return path


class ConfigWriter:
    """A callback that writes ``params.yaml`` once training has started (at the end of the
    first train loop or at the first checkpoint): a run refused before that (bad data, a
    checkpoint that does not fit) leaves ``model_dir`` as it was."""

    def __init__(self, params: ExperimentConfig, model_dir: str) -> None:
        self._params, self._model_dir = params, model_dir
        self.path: str | None = None

    def _write(self, *_: Any) -> None:
        if self.path is None:
            self.path = serialize_config(self._params, self._model_dir)
            print(f"torchgarden: config written to {self.path}", flush=True)

    on_train_loop_end = on_checkpoint_saved = _write


def build_checkpoint_manager(
    params: ExperimentConfig, trainer: Trainer, model_dir: str
) -> CheckpointManager:
    """The manager of ``model_dir/ckpt-<step>`` for the trainer's checkpoint, in the format
    the strategy resolves ``trainer.checkpoint_format`` to (which decides which ranks write)."""
    cfg = params.trainer
    return CheckpointManager(
        trainer.checkpoint,
        model_dir,
        max_to_keep=cfg.max_to_keep,
        checkpoint_interval=cfg.checkpoint_interval,
        init_fn=trainer.initialize,
        enable_async=cfg.enable_async_checkpointing,
        config=params.as_dict(),
        checkpoint_format=trainer.runtime.strategy.checkpoint_format(cfg.checkpoint_format),
    )


def build_export_callback(
    params: ExperimentConfig, trainer: Trainer, model_dir: str
) -> ExportOnBest | None:
    """``trainer.export_on_best``: an export of each new best checkpoint of what evaluates
    (the trainer, or a ``MultiTaskEvaluator``), on the chief."""
    exporter = trainer.checkpoint_exporter
    if not params.trainer.export_on_best or exporter is None or not trainer.runtime.is_chief:
        return None
    from torchgarden.export import start_export  # torch.export and ONNX: only when asked for.

    return ExportOnBest(best_exporter=exporter, start=functools.partial(start_export, model_dir),
                        max_to_keep=params.trainer.max_to_keep)


def build_preemption_watcher(params: ExperimentConfig) -> PreemptionWatcher | None:
    """A watcher of ``trainer.preemption_signals`` when on-demand checkpoints are on; none
    in a run started from another thread than the main one (only it takes signals)."""
    if (not params.trainer.preemption_on_demand_checkpoint
            or threading.current_thread() is not threading.main_thread()):
        return None
    return PreemptionWatcher(parse_signals(params.trainer.preemption_signals))


def build_controller(
    run: Run, params: ExperimentConfig, *, mode: str, save_summary: bool = True,
    callbacks: Iterable[Any] = (), summary_manager: SummaryManagerInterface | None = None,
    eval_summary_manager: SummaryManagerInterface | None = None,
    train_actions: Sequence[Any] = (), eval_actions: Sequence[Any] = (),
) -> Controller:
    """The Controller of ``run`` for ``mode``; it restores the checkpoint found (or
    initialises a fresh run).

    Besides the given callbacks (their state resumes with the run), a training run gets
    the config writer, the export of each new best checkpoint, blow-up recovery (a train
    action, and the initial state it rolls back to) and the observers of
    docs/observability.md.
    """
    trainer, cfg, training = run.trainer, params.trainer, run.training
    observers = build_observers(
        params, trainer, model_dir=run.model_dir, training=training, save_summary=save_summary,
        summary_manager=summary_manager, eval_summary_manager=eval_summary_manager)
    callbacks, recovery = _run_callbacks(run, params, list(callbacks))
    if run.resumed is None and params.runtime.seed is not None:
        seed_host_rngs(params.runtime.seed)  # Imports while building drew from them.
    try:
        return Controller(
            global_step=trainer.global_step,
            trainer=trainer if training else None,
            evaluator=run.evaluator,
            steps_per_loop=cfg.steps_per_loop if training else None,
            checkpoint_manager=run.checkpoint_manager,
            summary_interval=cfg.summary_interval if training and save_summary else None,
            summary_manager=observers.summary_manager,
            eval_summary_manager=observers.eval_summary_manager,
            train_actions=[*train_actions, *([recovery] if recovery is not None else [])],
            eval_actions=eval_actions,
            callbacks=[*callbacks, *observers.callbacks],
            progress_bar=cfg.progress_bar if trainer.runtime.is_chief else False,
            print_logs=trainer.runtime.is_chief,
            preemption=run.preemption,
            monitor=observers.monitor,
        )
    except CheckpointMismatchError as e:
        latest = run.checkpoint_manager.latest_checkpoint
        if latest is None:  # From task.init_checkpoint, whose message says what to fix.
            raise
        from torchgarden.checkpoint.checkpoint import STRICT_HINT

        problem = str(e).replace(STRICT_HINT, "").rstrip(". ")  # No strict= to pass here.
        raise CheckpointMismatchError(
            f"{problem}. It cannot be resumed under this config: use a new model_dir (with "
            f"task.init_checkpoint={latest} to start from its weights: --params_override on "
            "the command line, params.task.init_checkpoint in Python) or the config it was "
            "written with.") from e


def _run_callbacks(run: Run, params: ExperimentConfig,
                   callbacks: list[Any]) -> tuple[list[Any], RecoveryAction | None]:
    """The given callbacks (their state joins the checkpoint) and, when training, the
    config writer, the best-checkpoint export, blow-up recovery's initial state; and the
    recovery action."""
    trainer, manager = run.trainer, run.checkpoint_manager
    for index, callback in enumerate(callbacks):  # Early-stopping counters, best values.
        if hasattr(callback, "state_dict") and hasattr(callback, "load_state_dict"):
            trainer.checkpoint.add(**{f"callback_{index}_{type(callback).__name__}": callback})
    if not run.training:
        return callbacks, None
    chief = trainer.runtime.is_chief
    if chief:  # The run lock is held: no other writer.
        manager.remove_leftovers()  # Of a save or delete cut short by a kill.
    recovery, initial = build_recovery(params, trainer, manager, fresh_start=run.resumed is None)
    added = (ConfigWriter(params, run.model_dir) if chief else None,
             build_export_callback(params, run.evaluator, run.model_dir), initial)
    return [*callbacks, *(c for c in added if c is not None)], recovery
