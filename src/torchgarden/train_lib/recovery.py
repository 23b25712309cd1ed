"""Blow-up recovery wired to a Trainer: rollback target, per-step replay, batch skipping.

``callbacks.RecoveryAction`` decides *when* to roll back and what to skip; this module
gives it the Trainer-side means (:class:`TrainerRecoveryHooks`) and the state to roll
back to when no checkpoint exists yet (:class:`InitialState`).
"""

from __future__ import annotations

import logging
from typing import Any

from torchgarden.callbacks import RecoveryAction
from torchgarden.checkpoint import CheckpointManager
from torchgarden.config import ExperimentConfig
from torchgarden.core import Trainer
from torchgarden.train_lib.builders import LossBound

__all__ = ["InitialState", "TrainerRecoveryHooks", "build_recovery_action"]

_logger = logging.getLogger("torchgarden")


class TrainerRecoveryHooks:
    """:class:`~torchgarden.callbacks.RecoveryHooks` over a Trainer's loss check and its
    train ``DataIterator``.

    Args:
        trainer: The trainer whose ``check_loss`` is switched and whose data is skipped.
        bound: The per-step blow-up test used while replaying.
        data_source: How the train data is named in messages (its file, or its config key).
        always: Whether per-step checks are configured on anyway
            (``trainer.recovery_check_every_step``).
        batches_per_step: Batches one step reads (``gradient_accumulation_steps``).
    """

    def __init__(
        self, trainer: Trainer, bound: LossBound, data_source: str, *, always: bool,
        batches_per_step: int = 1,
    ) -> None:
        self._trainer = trainer
        self._batches_per_step = batches_per_step
        self._bound = bound
        self._data_source = data_source
        self._always = always

    @property
    def checking_every_step(self) -> bool:
        return self._trainer.check_loss is not None

    def check_every_step(self, enabled: bool) -> None:
        self._trainer.check_loss = self._bound if (enabled or self._always) else None

    def _iterator(self) -> Any:
        return self._trainer.checkpoint.items.get("train_iterator")

    def current_batches(self) -> list[Any]:
        iterator = self._iterator()
        if iterator is None or not hasattr(iterator, "last_positions"):
            return []
        return iterator.last_positions(self._batches_per_step)

    def skip(self, batches: list[Any]) -> None:
        iterator = self._iterator()
        if iterator is not None and hasattr(iterator, "skip"):
            iterator.skip(batches)

    def describe(self, batches: list[Any]) -> str:
        where = ", ".join(f"batch {index} of epoch {epoch}" for epoch, index in batches)
        return f"{where or 'an unknown batch'} of {self._data_source}"


class InitialState:
    """The trainer's state before its first step, kept in host memory for a rollback
    until the first checkpoint exists (Orbit's ``restore_or_initialize`` would otherwise
    leave blown-up weights in place when there is nothing to restore).

    Args:
        trainer: Whose ``checkpoint`` items are copied.
        manager: The run's checkpoint manager; once it holds a checkpoint, that is restored
            instead and the copy is dropped.
    """

    def __init__(self, trainer: Trainer, manager: CheckpointManager) -> None:
        self._checkpoint = trainer.checkpoint
        self._manager = manager
        self._state: dict[str, Any] | None = self._checkpoint.snapshot()

    def on_checkpoint_saved(self, step: int, path: str) -> None:
        """A checkpoint exists now: the copy is no longer needed."""
        del step, path
        self._state = None

    def restore(self) -> str | None:
        """Restores the last finite checkpoint, else the initial state; says which."""
        if self._manager.latest_checkpoint is not None or self._state is None:
            self._state = None
            return self._manager.restore_or_initialize()
        self._checkpoint.load_state_dict(self._state)
        return "the initial state (step 0)"


def build_recovery_action(
    params: ExperimentConfig, trainer: Trainer, checkpoint_manager: CheckpointManager,
    *, fresh_start: bool, callbacks: list[Any] | None = None,
) -> RecoveryAction | None:
    """Model Garden's blow-up recovery with batch skipping, unless ``recovery_max_trials < 0``.

    Args:
        params: The experiment config (``trainer.recovery_*``, ``loss_upper_bound``).
        trainer: The trainer.
        checkpoint_manager: Restores the last finite checkpoint.
        fresh_start: No checkpoint was restored: keep the initial state to roll back to.
        callbacks: The Controller's callbacks; the initial state joins them to be dropped
            at the first checkpoint.
    """
    cfg = params.trainer
    if cfg.recovery_max_trials < 0:
        return None
    bound = LossBound(cfg.loss_upper_bound, cfg.recovery_begin_steps)
    # Per-step checks read each rank's own loss, so under torchrun ranks could stop at
    # different steps: there, recovery rolls back on the loop's all-reduced loss only.
    hooks = None if trainer.runtime.is_distributed else TrainerRecoveryHooks(
        trainer, bound, _data_source(params), always=cfg.recovery_check_every_step,
        batches_per_step=cfg.gradient_accumulation_steps,
    )
    initial = (
        InitialState(trainer, checkpoint_manager)
        if fresh_start and cfg.recovery_max_trials > 0 else None
    )
    if initial is not None and callbacks is not None:
        callbacks.append(initial)
    return RecoveryAction(
        checkpoint_manager=checkpoint_manager,
        loss_upper_bound=cfg.loss_upper_bound,
        recovery_begin_steps=cfg.recovery_begin_steps,
        max_trials=cfg.recovery_max_trials,
        global_step=trainer.global_step,
        restore=initial.restore if initial is not None else None,
        hooks=hooks,
    )


def _data_source(params: ExperimentConfig) -> str:
    data = params.task.train_data
    path = getattr(data, "input_path", "")
    if isinstance(path, list | tuple):
        path = ", ".join(map(str, path))
    return f"task.train_data.input_path={path}" if path else "task.train_data"
