"""Configs become objects here too: the run's parts, its checkpoint manager, the Controller.

``run_experiment`` calls :func:`build_run` (trainer, evaluator, checkpoint manager, the
checkpoint to resume) and :func:`restored_controller` (callbacks, recovery, preemption,
summaries: the Controller, which restores). The Controller never sees a config; these
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

from torchgarden.callbacks import ExportOnBest
from torchgarden.checkpoint import CheckpointManager, CheckpointMismatchError
from torchgarden.config import ExperimentConfig
from torchgarden.config.multitask import MultiEvalExperimentConfig
from torchgarden.core import Task, Trainer
from torchgarden.export import start_export
from torchgarden.loop import Controller
from torchgarden.loop.progress import FirstLoopNotice
from torchgarden.multitask import MultiTask
from torchgarden.registry import get_task
from torchgarden.runtime import RuntimeContext, seed_host_rngs, setup_runtime, teardown_runtime
from torchgarden.runtime.preemption import PreemptionWatcher, parse_signals
from torchgarden.summary import SummaryManager, SummaryManagerInterface
from torchgarden.train_lib.builders import create_trainer
from torchgarden.train_lib.model_dir import EVAL_SUBDIR, NoCheckpointError
from torchgarden.train_lib.multitask import create_evaluator, create_multitask_trainer
from torchgarden.train_lib.observability import (
    TrackersClosed,
    build_loop_monitor,
    build_summary_managers,
    build_trackers,
    warn_if_schedule_ends_early,
)
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
    "create_evaluator",
    "create_trainer",
    "restored_controller",
    "serialize_config",
    "setup_runtime",
    "teardown_runtime",
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
    if trainer is None and isinstance(task, MultiTask):
        trainer = create_multitask_trainer(params, task, train=training, runtime=runtime)
    elif trainer is None:
        trainer = create_trainer(params, task, train=training, model_dir=model_dir,
                                 runtime=runtime, evaluate=evaluating and not multi_eval)
    if evaluator is None:
        evaluator = create_evaluator(params, task, trainer, evaluate=evaluating,
                                     model_dir=model_dir)
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


def restored_controller(
    run: Run, params: ExperimentConfig, *, mode: str, save_summary: bool,
    callbacks: Iterable[Any], summary_manager: SummaryManagerInterface | None,
    eval_summary_manager: SummaryManagerInterface | None, train_actions: Sequence[Any],
    eval_actions: Sequence[Any],
) -> Controller:
    """The Controller of ``run``, which restores the checkpoint found (or initialises),
    with the run's callbacks: the given ones (their state resumes with the run), the
    config writer, the export of each new best checkpoint and blow-up recovery."""
    trainer, manager, chief = run.trainer, run.checkpoint_manager, run.trainer.runtime.is_chief
    if run.training and chief:  # The run lock is held: no other writer.
        manager.remove_leftovers()  # Of a save or delete cut short by a kill.
    callbacks = list(callbacks)
    for index, callback in enumerate(callbacks):  # Early-stopping counters, best values.
        if hasattr(callback, "state_dict") and hasattr(callback, "load_state_dict"):
            trainer.checkpoint.add(**{f"callback_{index}_{type(callback).__name__}": callback})
    recovery, initial = build_recovery(params, trainer, manager, fresh_start=run.resumed is None) \
        if run.training else (None, None)
    if run.training:
        callbacks += [c for c in (ConfigWriter(params, run.model_dir) if chief else None,
                                  build_export_callback(params, run.evaluator, run.model_dir),
                                  initial) if c is not None]
    if run.resumed is None and params.runtime.seed is not None:
        seed_host_rngs(params.runtime.seed)  # Imports while building drew from them.
    try:
        return build_controller(
            params, trainer, evaluator=run.evaluator, mode=mode, model_dir=run.model_dir,
            checkpoint_manager=manager, save_summary=save_summary,
            summary_manager=summary_manager, eval_summary_manager=eval_summary_manager,
            callbacks=callbacks, eval_actions=eval_actions, preemption=run.preemption,
            train_actions=[*train_actions, *([recovery] if recovery is not None else [])])
    except CheckpointMismatchError as e:
        latest = manager.latest_checkpoint
        if latest is None:  # From task.init_checkpoint, whose message says what to fix.
            raise
        raise CheckpointMismatchError(
            f"{str(e).rstrip('. ')}. It cannot be resumed under this config: use a new "
            f"model_dir (with task.init_checkpoint={latest} to start from its weights) or "
            "the config it was written with.") from e


def serialize_config(params: ExperimentConfig, model_dir: str | os.PathLike[str]) -> str:
    """Writes ``params`` to ``model_dir/params.yaml`` atomically and returns the path.

    Reading the file back with ``type(params).from_yaml`` gives an equal config.
    """
    os.makedirs(model_dir, exist_ok=True)
    path = os.path.join(os.fspath(model_dir), "params.yaml")
    atomic_write_text(path, params.to_yaml())
    return path


class ConfigWriter:
    """Writes ``params.yaml`` once training has started: at the end of the first train
    loop or at the first checkpoint, whichever comes first.

    A run refused before that (a checkpoint that does not fit, bad data, a model whose
    output does not fit the loss) leaves ``model_dir`` as it was.

    Args:
        params: The resolved experiment config.
        model_dir: The run's directory.
    """

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
    the run's strategy writes (``trainer.checkpoint_format``, ``auto``: the strategy's).

    Every rank restores. In the single-file format only rank 0 writes (with FSDP2 every
    rank takes part in gathering the state for it); in the sharded (DCP) format every
    rank writes its own shards.
    """
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
    """``trainer.export_on_best``: an export of each new best checkpoint (chief only).

    ``trainer`` is what evaluates: the trainer, or a ``MultiTaskEvaluator``."""
    exporter = trainer.checkpoint_exporter
    if not params.trainer.export_on_best or exporter is None or not trainer.runtime.is_chief:
        return None
    return ExportOnBest(best_exporter=exporter, start=functools.partial(start_export, model_dir),
                        max_to_keep=params.trainer.max_to_keep)


def build_preemption_watcher(params: ExperimentConfig) -> PreemptionWatcher | None:
    """A watcher of ``trainer.preemption_signals`` when on-demand checkpoints are on.

    Signal handlers can only be installed from the main thread; elsewhere (a run
    started from a worker thread) there is no watcher.
    """
    if not params.trainer.preemption_on_demand_checkpoint:
        return None
    if threading.current_thread() is not threading.main_thread():
        return None
    return PreemptionWatcher(parse_signals(params.trainer.preemption_signals))


def build_controller(
    params: ExperimentConfig,
    trainer: Trainer,
    *,
    mode: str,
    model_dir: str,
    checkpoint_manager: CheckpointManager,
    save_summary: bool,
    summary_manager: SummaryManagerInterface | None,
    eval_summary_manager: SummaryManagerInterface | None,
    callbacks: Sequence[Any],
    train_actions: Sequence[Any],
    eval_actions: Sequence[Any],
    preemption: PreemptionWatcher | None = None,
    evaluator: Any = None,
) -> Controller:
    """The Controller for ``mode``; it restores the latest checkpoint (or initialises).

    ``evaluator`` evaluates (default: the trainer), e.g. a ``MultiTaskEvaluator``.

    Training modes also get the observers of docs/observability.md: trackers (their run
    ids join the checkpoint, and a ``TrackersClosed`` callback ends their runs with the
    experiment), throughput, the profiler window, the compile notice, and a warning
    when the learning-rate schedule ends before ``train_steps``.
    """
    cfg = params.trainer
    chief = trainer.runtime.is_chief
    write = save_summary and chief
    training = "train" in mode
    train_dir = os.path.join(model_dir, "train") if write else None
    # An evaluation job writes only under eval/: never where a trainer writes.
    evaluations = os.path.join(model_dir, cfg.validation_summary_subdir) if training else (
        os.path.join(model_dir, EVAL_SUBDIR))
    eval_dir = evaluations if write else None
    trackers = build_trackers(params, model_dir) if training and save_summary else []
    for tracker in trackers:  # On every rank: checkpoints hold the same items everywhere.
        trainer.checkpoint.add_optional(**{f"tracker_{tracker.name}": tracker})
    if not write:
        summary_manager = SummaryManager(None)
        eval_summary_manager = SummaryManager(None)
    else:
        default_train, default_eval = build_summary_managers(
            params, trainer, model_dir=model_dir, eval_dir=eval_dir, training=training,
            trackers=trackers)
        summary_manager = summary_manager or default_train
        eval_summary_manager = eval_summary_manager or default_eval
        if trackers:
            callbacks = [*callbacks, TrackersClosed(trackers)]
    if training and chief:
        warn_if_schedule_ends_early(params)
        if params.runtime.enable_xla:
            callbacks = [*callbacks, FirstLoopNotice("torch.compile")]
    return Controller(
        global_step=trainer.global_step,
        trainer=trainer if training else None,
        evaluator=trainer if evaluator is None else evaluator,
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
        monitor=build_loop_monitor(params, trainer, model_dir) if training else None,
    )
