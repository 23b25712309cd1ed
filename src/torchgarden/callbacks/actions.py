"""Orbit-style actions: callables run with each loop's raw output dict (REFERENCE §4.6, §11),
and the export of each new best checkpoint."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import re
import shutil
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from torchgarden.callbacks.base import Callback, lookup_metric
from torchgarden.checkpoint import BestCheckpointExporter
from torchgarden.utils.files import atomic_write_text
from torchgarden.utils.logs import Logs

__all__ = [
    "ConditionalAction", "ExportOnBest", "LossBound", "NewBestMetric", "RecoveryAction",
    "RecoveryHooks", "TrainingDivergedError",
]

_logger = logging.getLogger("torchgarden")
_EXPORT_NAME = re.compile(r"^export-(\d+)$")


class ConditionalAction:
    """Runs ``action`` (or each of a sequence) only when ``condition(output)`` is truthy.

    Example:
        >>> best = NewBestMetric("accuracy")
        >>> saved = []
        >>> action = ConditionalAction(condition=best, action=lambda out: saved.append(out))
        >>> action({"accuracy": 0.5}); action({"accuracy": 0.4})
        >>> len(saved)
        1
    """

    def __init__(
        self,
        condition: Callable[[Logs], Any],
        action: Callable[[Logs], Any] | Sequence[Callable[[Logs], Any]],
    ) -> None:
        self.condition = condition
        self.actions = list(action) if isinstance(action, (list, tuple)) else [action]

    def __call__(self, output: Logs) -> None:
        if self.condition(output):
            for action in self.actions:
                action(output)


class NewBestMetric:
    """Condition that is true when ``metric`` beats the best value so far (strictly).

    Args:
        metric: Log key (``|`` for nesting) or a function of the output.
        higher_is_better: Direction. Default True.
        filename: Optional JSON file persisting the best value (written atomically), so
            it survives restarts.
        write_metric: False makes this a read-only client of ``filename``.
    """

    def __init__(
        self,
        metric: str | Callable[[Logs], float],
        higher_is_better: bool = True,
        filename: str | None = None,
        write_metric: bool = True,
    ) -> None:
        self.metric = metric
        self.higher_is_better = higher_is_better
        self.filename = filename
        self.write_metric = write_metric
        self.best_value = -math.inf if higher_is_better else math.inf
        if filename and os.path.exists(filename):
            with open(filename, encoding="utf-8") as f:
                self.best_value = float(json.load(f))

    def metric_value(self, output: Logs) -> float:
        value = self.metric(output) if callable(self.metric) else lookup_metric(output, self.metric)
        return float(value)

    def test(self, output: Logs) -> bool:
        """Whether ``output`` is a new best, without recording it."""
        value = self.metric_value(output)
        return value > self.best_value if self.higher_is_better else value < self.best_value

    def commit(self, output: Logs) -> bool:
        """Like ``test``, and records the value when it is a new best."""
        if not self.test(output):
            return False
        self.best_value = self.metric_value(output)
        if self.filename and self.write_metric:
            atomic_write_text(self.filename, json.dumps(self.best_value))
        return True

    __call__ = commit


class ExportOnBest(Callback):
    """Exports each new best checkpoint of ``best_exporter`` (Orbit's export action).

    The ``BestCheckpointExporter`` chooses the best checkpoint (Model Garden: a
    ``NewBestMetric`` condition). After an evaluation that made a new best, an export of it
    starts to ``<best dir>/export-<step>/``; the newest ``max_to_keep`` are kept. Training
    waits for an export only at the next evaluation (which may replace the checkpoint being
    read) and at the end; without ``run_experiment`` (which calls ``on_experiment_end``),
    call :meth:`wait` at the end.

    Args:
        best_exporter: The trainer's best-checkpoint exporter.
        start: ``start(checkpoint_path, output_dir)`` begins an export and returns an
            object whose ``wait()`` returns None on success or an error message.
        max_to_keep: Exports kept in the best-checkpoint directory. Defaults to 5.
    """

    def __init__(self, *, best_exporter: BestCheckpointExporter,
                 start: Callable[[str, str], Any], max_to_keep: int = 5) -> None:
        if max_to_keep < 1:
            raise ValueError(f"ExportOnBest max_to_keep must be >= 1, got {max_to_keep}.")
        self.best_exporter = best_exporter
        self.start = start
        self.max_to_keep = max_to_keep
        self._pending: Any = None

    def exports(self) -> list[tuple[int, str]]:
        """``(step, path)`` of the export directories, oldest first."""
        directory = self.best_exporter.export_dir
        if not os.path.isdir(directory):
            return []
        found = [(int(m.group(1)), os.path.join(directory, m.group(0)))
                 for m in map(_EXPORT_NAME.match, os.listdir(directory)) if m]
        return sorted(found)

    def wait(self) -> None:
        """Waits for the running export (if any), logs its failure, applies retention."""
        if self._pending is None:
            return
        pending, self._pending = self._pending, None
        error = pending.wait()
        if error is not None:
            _logger.warning("export of the best checkpoint to %s failed: %s",
                            pending.output_dir, error)
        for _, path in self.exports()[:-self.max_to_keep]:
            shutil.rmtree(path, ignore_errors=True)

    def on_eval_begin(self, step: int) -> None:
        self.wait()  # The evaluation may replace the best checkpoint the export reads.

    def on_eval_end(self, step: int, logs: Logs) -> None:
        best = self.best_exporter.best_ckpt_logs or {}
        path = self.best_exporter.best_ckpt_path
        if best.get("best_ckpt_global_step") != step or path is None:
            return
        output_dir = os.path.join(self.best_exporter.export_dir, f"export-{step}")
        if os.path.exists(output_dir):
            return  # exported before a restart
        self.wait()
        self._pending = self.start(path, output_dir)

    def on_experiment_end(self, eval_logs: Logs) -> None:
        self.wait()


class TrainingDivergedError(RuntimeError):
    """The loss blew up more often than ``recovery_max_trials`` allows; the message is Model
    Garden's, then the step and, where known, the batch and data file."""


@dataclasses.dataclass(frozen=True)
class LossBound:
    """Is a step's loss a blow-up? NaN, or above ``upper_bound`` from ``begin_steps`` on
    (Model Garden's ``loss_upper_bound`` and ``recovery_begin_steps``)."""

    upper_bound: float
    begin_steps: int

    def __call__(self, step: int, loss: float) -> bool:
        return loss != loss or (step >= self.begin_steps and loss > self.upper_bound)


class RecoveryHooks(Protocol):
    """What :class:`RecoveryAction` needs from the trainer (``train_lib`` provides it)."""

    @property
    def checking_every_step(self) -> bool:
        """Whether the trainer checks the loss after every step (stops at the bad step)."""

    def check_every_step(self, enabled: bool) -> None:
        """Turns per-step loss checks on (for a replay) or back to the configured default."""

    def current_batches(self) -> list[Any]:
        """The data positions of the batches the step just taken consumed."""

    def skip(self, batches: list[Any]) -> None:
        """Makes the data iterator step over these positions from now on."""

    def describe(self, batches: list[Any]) -> str:
        """``"batch 3 of epoch 0 of data.npz"``."""


class RecoveryAction:
    """Rolls back a loss blow-up (:class:`LossBound`; REFERENCE §11) and steps over the
    batch that caused it.

    Each trip restores the last finite checkpoint (or the initial state) and counts one
    trial. The first replays the steps since, checking the loss after every step, so a
    transient blow-up ends as if it never happened; a second within those steps skips the
    batches of the exact step from then on (changing the trajectory instead of looping).
    After more than ``max_trials`` trips it raises :class:`TrainingDivergedError`.

    Args:
        checkpoint_manager: Restores the latest checkpoint (or initialises).
        loss_upper_bound: Upper bound of a healthy loss. Default 1e6.
        recovery_begin_steps: First step at which the bound is enforced. Default 0.
        max_trials: Recoveries allowed before failing. Default 0 (fail on the first).
        global_step: The shared step counter.
        loss_key: Train-log key of the loss. Default ``"training_loss"``.
        restore: Restores the last finite state and returns what it restored (a path or
            a description). Default: ``checkpoint_manager.restore_or_initialize``.
        hooks: Per-step checks and batch skipping. None: plain Orbit rollbacks.
    """

    def __init__(
        self,
        *,
        checkpoint_manager: Any,
        loss_upper_bound: float = 1e6,
        recovery_begin_steps: int = 0,
        max_trials: int = 0,
        global_step: Any = None,
        loss_key: str = "training_loss",
        restore: Callable[[], str | None] | None = None,
        hooks: RecoveryHooks | None = None,
    ) -> None:
        self.checkpoint_manager = checkpoint_manager
        self.loss_bound = LossBound(loss_upper_bound, recovery_begin_steps)
        self.max_trials = max_trials
        self.global_step = global_step
        self.loss_key = loss_key
        self.recover_counter = 0
        self._restore = restore or checkpoint_manager.restore_or_initialize
        self._hooks = hooks
        self._replay_until: int | None = None  # End of the steps being replayed.

    def __call__(self, output: Logs) -> None:
        if self.loss_key not in output:
            return
        loss = float(output[self.loss_key])  # Host sync: once per loop.
        step = int(self.global_step) if self.global_step is not None else 0
        hooks = self._hooks
        if not self.loss_bound(step, loss):
            if self._replay_until is not None and step >= self._replay_until:
                self._replay_until = None  # Replayed cleanly: a transient blow-up.
                if hooks is not None:
                    hooks.check_every_step(False)
            return
        self.recover_counter += 1
        exact = hooks is not None and hooks.checking_every_step
        batches = hooks.current_batches() if exact and hooks is not None else []
        repeated = exact and self._replay_until is not None and step <= self._replay_until
        if self.recover_counter > self.max_trials:
            raise TrainingDivergedError(self._failure(loss, step, batches, repeated))
        restored = self._restore() or "the initial state"
        if repeated and batches and hooks is not None:
            hooks.skip(batches)
            action = f"skipping {hooks.describe(batches)} from now on, as it blew up twice"
        else:
            if hooks is not None:
                hooks.check_every_step(True)
            action = "replaying, checking every step"
        self._replay_until = step
        _logger.warning(
            "recovering from a loss blow-up (loss=%s at step %d, trial %d of %d): restored "
            "%s; %s.", loss, step, self.recover_counter, self.max_trials, restored, action,
        )
    def _failure(self, loss: float, step: int, batches: list[Any], repeated: bool) -> str:
        if math.isnan(loss):
            head = (f"The loss value is NaN after training loop and it happens "
                    f"{self.recover_counter} times.")
        else:
            head = (f"The loss value is {loss}, which is larger than the bound "
                    f"{self.loss_bound.upper_bound}, happens {self.recover_counter} times.")
        where = f" At step {step}"
        if batches and self._hooks is not None:
            where += f", reading {self._hooks.describe(batches)}"
        hint = (
            "; it blew up again at the same steps after a rollback, so the batch is the likely "
            "cause: allow one more trial (trainer.recovery_max_trials) to skip it"
            if repeated else "; check the data and the learning rate"
        )
        latest = getattr(self.checkpoint_manager, "latest_checkpoint", None)
        kept = f"; the last finite checkpoint {latest} is intact" if latest else ""
        return f"{head}{where}{hint}{kept}."
