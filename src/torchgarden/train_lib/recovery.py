"""Blow-up recovery wired to a Trainer: rollback target, replay plan, batch skipping.

``callbacks.RecoveryAction`` decides *when* to roll back and what to skip; this module
gives it the Trainer-side means (:class:`TrainerRecoveryHooks`) and the state to roll
back to when no checkpoint exists yet (:class:`InitialState`).
"""

from __future__ import annotations

from typing import Any

from torchgarden.callbacks import RecoveryAction
from torchgarden.checkpoint import CheckpointManager
from torchgarden.config import ExperimentConfig
from torchgarden.core import Trainer

__all__ = ["InitialState", "TrainerRecoveryHooks", "build_recovery"]


class TrainerRecoveryHooks:
    """:class:`~torchgarden.callbacks.RecoveryHooks` over a Trainer's step plan and its
    train ``DataIterator``: a replay runs under ``trainer.plan.replay`` (one step per
    call, the loss checked after each); ``data_source`` names the data in messages."""

    def __init__(self, trainer: Trainer, data_source: str) -> None:
        self._trainer = trainer
        self._data_source = data_source

    @property
    def checking_every_step(self) -> bool:
        return self._trainer.active_plan.check_loss is not None

    def check_every_step(self, enabled: bool) -> None:
        self._trainer.replaying = enabled

    def _iterator(self) -> Any:
        return self._trainer.checkpoint.items.get("train_iterator")

    def current_batches(self) -> list[Any]:
        iterator = self._iterator()
        if iterator is None or not hasattr(iterator, "last_positions"):
            return []
        return iterator.last_positions(self._trainer.plan.accumulation_steps)

    def skip(self, batches: list[Any]) -> None:
        iterator = self._iterator()
        if iterator is not None and hasattr(iterator, "skip"):
            iterator.skip(batches)

    def describe(self, batches: list[Any]) -> str:
        where = ", ".join(f"batch {index} of epoch {epoch}" for epoch, index in batches)
        return f"{where or 'an unknown batch'} of {self._data_source}"


class InitialState:
    """A callback keeping the trainer's state before its first step in host memory, the
    rollback target until the first checkpoint exists (Orbit's ``restore_or_initialize``
    would leave blown-up weights in place when there is nothing to restore). The copy is
    taken when training begins (after ``init_checkpoint`` was loaded)."""

    def __init__(self, trainer: Trainer, manager: CheckpointManager) -> None:
        self._checkpoint = trainer.checkpoint
        self._manager = manager
        self._state: dict[str, Any] | None = None
        self._dropped = False

    def on_train_begin(self, step: int) -> None:
        """Copies the state before the first step (once)."""
        del step
        if self._state is None and not self._dropped:
            self._state = self._checkpoint.snapshot()

    def on_checkpoint_saved(self, step: int, path: str) -> None:
        """A checkpoint exists now: the copy is no longer needed."""
        del step, path
        self._state, self._dropped = None, True

    def restore(self) -> str | None:
        """Restores the last finite checkpoint, else the initial state; says which."""
        if self._manager.latest_checkpoint is not None or self._state is None:
            self._state, self._dropped = None, True
            return self._manager.restore_or_initialize()
        self._checkpoint.load_state_dict(self._state)
        return "the initial state (step 0)"


def build_recovery(
    params: ExperimentConfig, trainer: Trainer, checkpoint_manager: CheckpointManager,
    *, fresh_start: bool,
) -> tuple[RecoveryAction | None, InitialState | None]:
    """Model Garden's blow-up recovery (unless ``recovery_max_trials < 0``), skipping
    batches where the trainer's plan declares a replay, and the initial state it rolls
    back to on a fresh start."""
    cfg = params.trainer
    if cfg.recovery_max_trials < 0:
        return None, None
    hooks = TrainerRecoveryHooks(trainer, _data_source(params)) if trainer.plan.replay else None
    initial = (InitialState(trainer, checkpoint_manager)
               if fresh_start and cfg.recovery_max_trials > 0 else None)
    action = RecoveryAction(
        checkpoint_manager=checkpoint_manager,
        loss_upper_bound=cfg.loss_upper_bound,
        recovery_begin_steps=cfg.recovery_begin_steps,
        max_trials=cfg.recovery_max_trials,
        global_step=trainer.global_step,
        restore=initial.restore if initial is not None else None,
        hooks=hooks,
    )
    return action, initial


def _data_source(params: ExperimentConfig) -> str:
    data = params.task.train_data
    path = getattr(data, "input_path", "")
    if isinstance(path, list | tuple):
        path = ", ".join(map(str, path))
    return f"task.train_data.input_path={path}" if path else "task.train_data"
