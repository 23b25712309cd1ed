"""``Controller``: when things happen — Orbit's outer loop.

The Controller calls ``trainer.train(n)`` and ``evaluator.evaluate(n)`` and, around those
two calls only, decides when to checkpoint, write summaries, log, evaluate, and run
callbacks and actions (REFERENCE §4.4). It never sees a config or a batch.

Differences from Orbit, on purpose:
  * ``summary_interval`` really sets how often train scalars are written.
  * A train loop that does not advance the global step by the requested amount raises.
  * A checkpoint manager with no interval saves at every loop end (Orbit: never).
  * With an integer ``steps_per_loop``, a loop that starts off a multiple of it (after a
    preemption checkpoint mid-loop) ends at the next multiple, so a resumed run writes
    its summaries at the same steps, over the same windows, as an uninterrupted one.
  * Train summaries are also written at the last step; a restored (or initialised) run
    has its summary managers forget what was written past its step (``resume_at``).
  * Log lines carry an ETA and, with a ``ThroughputMeter``, examples/s and the data wait.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from torchgarden.checkpoint import CheckpointError, checkpoints_iterator
from torchgarden.loop.logs import ProgressBar, format_output, to_host
from torchgarden.loop.throughput import LoopMonitor
from torchgarden.runtime.preemption import Preempted
from torchgarden.summary import SummaryManager, SummaryManagerInterface
from torchgarden.utils import startup
from torchgarden.utils.logs import Logs

__all__ = ["Controller", "Action"]

_logger = logging.getLogger("torchgarden")

Action = Callable[[Logs], Any]


def _check_arguments(
    trainer: Any, evaluator: Any, spl: Any, interval: int | None, global_step: Any
) -> None:
    """Raises ``ValueError`` naming the first inconsistent ``Controller`` argument."""
    if trainer is None and evaluator is None:
        raise ValueError("Controller needs a `trainer` or an `evaluator` (got neither).")
    if trainer is not None and spl is None:
        raise ValueError("`steps_per_loop` is required when a `trainer` is given.")
    if trainer is not None and not callable(spl) and (not isinstance(spl, int) or spl < 1):
        raise ValueError(f"`steps_per_loop` must be a positive int or a callable, got {spl!r}.")
    if interval is not None and interval <= 0:
        raise ValueError(f"`summary_interval` must be positive, got {interval}.")
    if interval and isinstance(spl, int) and interval % spl:
        raise ValueError(f"`summary_interval` ({interval}) must be a multiple of "
                         f"`steps_per_loop` ({spl}); set it to {spl * max(1, interval // spl)}.")
    try:
        int(global_step)
    except TypeError:
        raise ValueError("`global_step` must be an int-like counter shared with the trainer "
                         f"(e.g. trainer.global_step), got {type(global_step).__name__}.") from None


class Controller:
    """Runs training and evaluation loops and their side effects.

    Args:
        global_step: The step counter shared with the trainer (anything ``int()`` reads).
        trainer: Object with ``train(num_steps) -> logs``.
        evaluator: Object with ``evaluate(num_steps) -> logs``.
        steps_per_loop: Steps per ``trainer.train`` call; an int or ``f(step) -> int``.
        checkpoint_manager: A ``checkpoint.CheckpointManager``; restored from at once.
        summary_interval: Steps between train scalar writes (a multiple of an integer
            ``steps_per_loop``). Default: every loop.
        summary_dir: Directory of train summaries (ignored with ``summary_manager``).
        eval_summary_dir: Directory of eval summaries; defaults to ``summary_dir``.
        summary_manager: Train ``SummaryManagerInterface``; default one on ``summary_dir``.
        eval_summary_manager: Eval summary manager; default one on ``eval_summary_dir``.
        train_actions: Callables run with the train logs after every loop.
        eval_actions: Callables run with the eval logs after every evaluation.
        callbacks: ``callbacks.Callback`` objects (loop hooks, may stop training).
        progress_bar: Show a tqdm bar with ETA; None = when stdout is a terminal.
        print_logs: Print Orbit-format log lines to stdout (also sent to ``logging``).
        preemption: A ``runtime.PreemptionWatcher``; when it fires, the loop in progress
            ends, a checkpoint is saved and ``runtime.Preempted`` is raised.
        monitor: A ``LoopMonitor`` with a ``ThroughputMeter`` (``throughput/*`` and
            ``memory/*`` join the train logs) and a ``ProfilerWindow``. Default: steps/sec.
    """

    def __init__(
        self,
        *,
        global_step: Any,
        trainer: Any = None,
        evaluator: Any = None,
        steps_per_loop: int | Callable[[int], int] | None = None,
        checkpoint_manager: Any = None,
        summary_interval: int | None = None,
        summary_dir: str | None = None,
        eval_summary_dir: str | None = None,
        summary_manager: SummaryManagerInterface | None = None,
        eval_summary_manager: SummaryManagerInterface | None = None,
        train_actions: Sequence[Action] | None = None,
        eval_actions: Sequence[Action] | None = None,
        callbacks: Iterable[Any] = (),
        progress_bar: bool | None = None,
        print_logs: bool = True,
        preemption: Any = None,
        monitor: LoopMonitor | None = None,
    ) -> None:
        _check_arguments(trainer, evaluator, steps_per_loop, summary_interval, global_step)
        self.trainer = trainer
        self.evaluator = evaluator
        self.global_step = global_step
        self.steps_per_loop = steps_per_loop
        self.checkpoint_manager = checkpoint_manager
        self.summary_interval = summary_interval
        self.train_actions = list(train_actions or [])
        self.eval_actions = list(eval_actions or [])
        self.callbacks = list(callbacks)
        self.print_logs = print_logs
        self.preemption = preemption
        self.monitor = monitor or LoopMonitor()
        self.stop_training = False
        self._startup: dict[str, float] = {}  # Reported, not yet written to a summary.
        self._progress = ProgressBar(sys.stdout.isatty() if progress_bar is None else progress_bar)
        step = self._current_step
        self.summary_manager = summary_manager or SummaryManager(
            summary_dir if trainer is not None else None, global_step=step)
        self.eval_summary_manager: SummaryManagerInterface | None = None
        if evaluator is not None:
            eval_summary_dir = eval_summary_dir or summary_dir
            if eval_summary_dir == summary_dir and trainer is not None:
                eval_summary_manager = eval_summary_manager or summary_manager  # Shared.
            self.eval_summary_manager = eval_summary_manager or SummaryManager(
                eval_summary_dir, global_step=step)
        self._final_step: int | None = None  # The step training ends at (train_steps).
        self._callbacks("set_controller", self)
        if self.checkpoint_manager is not None:
            self.restore_checkpoint()
        elif trainer is not None:
            self._resume_summaries()

    def _current_step(self) -> int:
        return int(self.global_step)

    def _log(self, message: str) -> None:
        _logger.info(message)
        if self.print_logs:
            self._progress.write(message)

    def _require(self, attr: str, method: str) -> None:
        if getattr(self, attr, None) is None:
            raise ValueError(f"`{attr}` is not set. Pass `{attr}` to `Controller.__init__` "
                             f"before calling `{method}()`.")

    def _callbacks(self, hook: str, *args: Any) -> None:
        for callback in self.callbacks:
            fn = getattr(callback, hook, None)
            if fn is not None:
                fn(*args)
        # Keras' spelling, `self.model.stop_training = True` in a hook, stops training too.
        model = getattr(self.trainer or self.evaluator, "unwrapped_model", None)
        if model is not None and model.__dict__.pop("stop_training", False):
            self.stop_training = True

    @staticmethod
    def _write(manager: SummaryManagerInterface, output: Logs, step: int) -> None:
        # torchgarden's managers take the step (one built without a global_step still
        # writes at the right step); others get Orbit's call and read the step themselves.
        if isinstance(manager, SummaryManager):
            manager.write_summaries(output, step=step)
        else:
            manager.write_summaries(output)
        manager.flush()

    def _resume_summaries(self) -> None:
        # An interrupted (or blown-up) run forgets what it wrote past the current step.
        managers = [self.summary_manager, self.eval_summary_manager]
        if managers[1] is managers[0]:
            managers.pop()
        for manager in managers:
            resume = getattr(manager, "resume_at", None)  # None without an evaluator.
            if resume is not None:
                resume(self._current_step())

    def restore_checkpoint(self, checkpoint_path: str | None = None) -> str | None:
        """Restores ``checkpoint_path``, or the latest checkpoint, or initialises; returns
        the restored path (None: initialised)."""
        self._require("checkpoint_manager", "restore_checkpoint")
        with startup.timed("restore"):
            if checkpoint_path is not None:
                self._log(f"restoring model from {checkpoint_path}...")
                path = self.checkpoint_manager.restore(checkpoint_path)
            else:
                self._log("restoring or initializing model...")
                path = self.checkpoint_manager.restore_or_initialize()
        if path is not None:
            self._log(f"restored model from {path} at step {self._current_step()}.")
            self._callbacks("on_checkpoint_restored", self._current_step(), path)
        else:
            self._log("initialized model.")
        if self.trainer is not None:
            self._resume_summaries()
        return path

    def save_checkpoint(self) -> str | None:
        """Saves a checkpoint now (not interval-gated)."""
        self._require("checkpoint_manager", "save_checkpoint")
        return self._maybe_save_checkpoint(check_interval=False)

    def _maybe_save_checkpoint(self, check_interval: bool = True) -> str | None:
        if self.checkpoint_manager is None:
            return None
        step = self._current_step()
        path = self.checkpoint_manager.save(checkpoint_number=step, check_interval=check_interval)
        if path is not None:
            self._log(f"saved checkpoint to {path}.")
            self._callbacks("on_checkpoint_saved", step, path)
        return path

    def train(self, steps: int, checkpoint_at_completion: bool = True) -> None:
        """Trains until the global step reaches ``steps`` (an absolute target), then saves
        a checkpoint unless ``checkpoint_at_completion`` is False."""
        self._require("trainer", "train")
        current = self._current_step()
        top_level = self._final_step is None  # Else train_and_evaluate's.
        if current >= steps and top_level:
            self._log(f"train | step: {current: 6d} | already at train_steps={steps}, "
                      "nothing to train.")
        else:
            self._log(f"train | step: {current: 6d} | training until step {steps}...")
        self.stop_training = False
        self._callbacks("on_train_begin", current)
        self._progress.open(current, steps)
        if top_level:
            self._final_step = steps
        try:
            while current < steps and not self.stop_training:
                num_steps = min(steps - current, self._loop_length(current))
                self._train_n_steps(num_steps)
                current = self._current_step()
                if top_level or current < steps:  # train_and_evaluate saves after its eval.
                    self._maybe_save_checkpoint()
        finally:
            self._progress.close()
            if top_level:
                self._final_step = None
        if checkpoint_at_completion:
            self._maybe_save_checkpoint(check_interval=False)
        self._sync_checkpoints()
        self._callbacks("on_train_end", self._current_step())

    def _loop_length(self, current: int) -> int:
        spl = self.steps_per_loop  # An int: back onto its grid after a partial loop.
        length = int(spl(current)) if callable(spl) else int(spl) - current % int(spl)
        return self.monitor.loop_length(current, length)

    def _train_n_steps(self, num_steps: int) -> None:
        current = self._current_step()
        self._callbacks("on_train_loop_begin", current)
        self.monitor.begin(current, num_steps)
        train_output = self.trainer.train(num_steps) or {}
        new_step = self._current_step()
        stopped_early = bool(getattr(self.trainer, "stopped_early", False))
        if new_step - current != num_steps and not stopped_early:
            raise RuntimeError(
                f"`trainer.train({num_steps})` moved the global step from {current} to "
                f"{new_step}; a train loop must advance it by exactly {num_steps}. Increment "
                "trainer.global_step once per step in custom train_step overrides."
            )
        for action in self.train_actions:
            action(train_output)
        output = to_host(train_output)  # The one host sync of the loop.
        rates, figures = self.monitor.end(current, new_step, self._final_step)
        self._log(f"train | step: {new_step: 6d} | {rates}output: {format_output(output)}")
        output.update(figures)
        self._startup.update((k, v) for k, v in figures.items() if k.startswith("startup/"))
        # Train summaries are written when the loop crossed a multiple of summary_interval
        # (every loop without one), and at the last step of training.
        interval = self.summary_interval
        if self._current_step() < new_step:  # Blow-up recovery restored an earlier step.
            self._resume_summaries()
        elif (interval is None or new_step // interval > current // interval
              or new_step == self._final_step):
            # The start-up figures go with the first summary written, whichever loop's.
            self._write(self.summary_manager, {**self._startup, **output}, new_step)
            self._startup = {}
        self._progress.update(new_step - current, output.get("training_loss"))
        preempted_mid_loop = stopped_early and getattr(self.preemption, "requested", False)
        if not preempted_mid_loop:  # Else the resumed run finishes the loop and reports it.
            self._callbacks("on_train_loop_end", new_step, output)
        if self.preemption is not None and self.preemption.agreed():
            path = self._maybe_save_checkpoint(check_interval=False)
            self._sync_checkpoints()
            path = path or getattr(self.checkpoint_manager, "latest_checkpoint", None)
            self._log(f"preempted at step {new_step}: checkpoint {path}; exiting.")
            raise Preempted(new_step, path, getattr(self.preemption, "exit_code", 143))

    def evaluate(self, steps: int = -1) -> Logs:
        """Runs ``steps`` eval steps (-1: the whole dataset) and returns the logs."""
        self._require("evaluator", "evaluate")
        if steps != -1 and steps <= 0:
            raise ValueError(f"evaluate(steps={steps}): steps must be positive or exactly -1.")
        current = self._current_step()
        what = f"running {steps} steps of" if steps > 0 else "running complete"
        self._log(f" eval | step: {current: 6d} | {what} evaluation...")
        self._callbacks("on_eval_begin", current)
        start = time.perf_counter()
        eval_output = self.evaluator.evaluate(steps) or {}
        elapsed = time.perf_counter() - start
        for action in self.eval_actions:
            action(eval_output)
        output = to_host(eval_output)
        rate = ""
        if steps > 0:
            output["steps_per_second"] = steps / elapsed if elapsed > 0 else math.inf
            rate = f"steps/sec: {output['steps_per_second']: 6.1f} | "
        self._log(f" eval | step: {current: 6d} | {rate}eval time: {elapsed: 6.1f} sec | "
                  f"output: {format_output(output)}")
        self._write(self.eval_summary_manager, output, current)
        self._callbacks("on_eval_end", current, output)
        return output

    def train_and_evaluate(
        self, train_steps: int, eval_steps: int = -1, eval_interval: int | None = None
    ) -> Logs:
        """Alternates training and evaluation until ``train_steps``.

        Eval points are counted from the step at which the call starts (Orbit
        semantics); the last evaluation happens at ``train_steps``. A checkpoint due at
        an eval point is saved after that evaluation, so it holds the evaluation's
        effects (callback state, best metric) and a run killed mid-evaluation redoes it.
        """
        self._require("trainer", "train_and_evaluate")
        self._require("evaluator", "train_and_evaluate")
        current = self._current_step()
        if current >= train_steps:
            self._log(f"train | step: {current: 6d} | already at train_steps={train_steps}, "
                      "nothing to train.")
            return self._final_evaluation(current, eval_steps)
        interval = eval_interval or max(train_steps - current, 1)
        output: Logs = {}
        self._final_step = train_steps
        try:
            while current < train_steps and not self.stop_training:
                self.train(steps=min(current + interval, train_steps),
                           checkpoint_at_completion=False)
                output = self.evaluate(steps=eval_steps)
                self._maybe_save_checkpoint()
                current = self._current_step()
        finally:
            self._final_step = None
        self._maybe_save_checkpoint(check_interval=False)
        self._sync_checkpoints()
        return output

    def _final_evaluation(self, step: int, eval_steps: int) -> Logs:
        """The evaluation recorded at ``step`` (a finished run's), else a new one."""
        recorded = getattr(self.eval_summary_manager, "recorded", None)
        logs = recorded(step) if recorded is not None else None
        if logs is None:
            return self.evaluate(steps=eval_steps)
        self._log(f" eval | step: {step: 6d} | recorded earlier | output: {format_output(logs)}")
        return logs

    def evaluate_continuously(
        self,
        steps: int = -1,
        timeout: float | None = None,
        timeout_fn: Callable[[], bool] | None = None,
    ) -> Logs:
        """Evaluates every new checkpoint as it appears (never a half-written one); one the
        trainer's ``max_to_keep`` deletes before it is read is skipped with a log line.

        Args:
            steps: Eval steps per checkpoint (-1: whole dataset).
            timeout: Seconds to wait for a new checkpoint before calling ``timeout_fn``.
            timeout_fn: Returns True to stop waiting (e.g. training has finished).
        """
        self._require("evaluator", "evaluate_continuously")
        self._require("checkpoint_manager", "evaluate_continuously")
        output: Logs = {}
        directory = self.checkpoint_manager.directory
        for path in checkpoints_iterator(directory, timeout=timeout, timeout_fn=timeout_fn):
            try:
                self.restore_checkpoint(path)
            except (OSError, CheckpointError):
                if os.path.isdir(path):  # Damaged, not deleted: that is an error.
                    raise
                self._log(f"{path} was deleted (max_to_keep) before it was read; skipped.")
                continue
            output = self.evaluate(steps)
        return output

    def _sync_checkpoints(self) -> None:
        sync = getattr(self.checkpoint_manager, "sync", None)
        if sync is not None:
            sync()
