"""Configs become objects here too: the checkpoint manager, the Controller and its actions.

The Controller never sees a config; these builders read ``trainer`` settings and hand
it built objects (summary managers, a checkpoint manager, actions, callbacks).
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Sequence
from typing import Any

from torchgarden.callbacks import ExportOnBest
from torchgarden.checkpoint import CheckpointManager
from torchgarden.config import ExperimentConfig
from torchgarden.core import Trainer
from torchgarden.export import start_export
from torchgarden.loop import Controller
from torchgarden.loop.progress import FirstLoopNotice
from torchgarden.runtime.preemption import PreemptionWatcher, parse_signals
from torchgarden.summary import SummaryManager, SummaryManagerInterface
from torchgarden.train_lib.builders import checkpoint_format
from torchgarden.train_lib.model_dir import EVAL_SUBDIR
from torchgarden.train_lib.observability import (
    TrackersClosed,
    build_loop_monitor,
    build_summary_managers,
    build_trackers,
    warn_if_schedule_ends_early,
)
from torchgarden.utils.files import atomic_write_text

__all__ = [
    "ConfigWriter",
    "build_checkpoint_manager",
    "build_controller",
    "build_export_callback",
    "build_preemption_watcher",
    "serialize_config",
]


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
    """The manager of ``model_dir/ckpt-<step>`` for the trainer's checkpoint.

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
        checkpoint_format=checkpoint_format(params),
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
