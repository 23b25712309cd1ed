"""``ProfilerWindow``: a ``torch.profiler`` trace of exactly the train steps asked for."""

from __future__ import annotations

import logging
import os
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function, tensorboard_trace_handler

__all__ = ["ProfilerWindow"]

_logger = logging.getLogger("torchgarden")


class ProfilerWindow:
    """Records train steps ``first_step..last_step`` (global steps after each step,
    1-based, both included) into ``trace_dir``.

    The Controller ends a loop right before the window and right at its end, and records
    the loops in between, each as a ``train_steps <a>-<b>`` range (the optimizer's steps
    are ``Optimizer.step#...`` events). The trace, ``<worker>.<time>.pt.trace.json``, is a
    Chrome trace (``chrome://tracing``, Perfetto) that TensorBoard's profile plugin
    (``torch-tb-profiler``) also reads.

    Args:
        first_step: The first train step recorded (>= 1).
        last_step: The last train step recorded (>= first_step).
        trace_dir: Where the trace file goes (created when the window opens).
        cuda: Also record CUDA kernels.
        worker_name: The trace file's prefix (the rank under torchrun).
    """

    def __init__(
        self, *, first_step: int, last_step: int, trace_dir: str, cuda: bool = False,
        worker_name: str | None = None,
    ) -> None:
        if not 1 <= first_step <= last_step:
            raise ValueError(
                f"profile steps must satisfy 1 <= first <= last, got [{first_step}, {last_step}]."
            )
        self.first_step, self.last_step = int(first_step), int(last_step)
        self.trace_dir = os.fspath(trace_dir)
        self._cuda = cuda
        self._activities = [ProfilerActivity.CPU] + [ProfilerActivity.CUDA] * cuda
        self._worker_name = worker_name
        self._profiler: Any = None
        self._range: Any = None

    def steps_to_edge(self, step: int) -> int | None:
        """Steps from ``step`` to the next loop end the window needs, or None past it."""
        return next((edge - step for edge in (self.first_step - 1, self.last_step)
                     if edge > step), None)

    def covers(self, step: int, num_steps: int) -> bool:
        """Whether the loop of ``num_steps`` starting after ``step`` is in the window."""
        return self.first_step <= step + 1 and step + num_steps <= self.last_step

    def start(self, step: int, num_steps: int) -> None:
        """Starts recording a loop of ``num_steps`` after global step ``step``."""
        if self._profiler is None:
            os.makedirs(self.trace_dir, exist_ok=True)
            self._profiler = profile(
                activities=self._activities, record_shapes=True,
                on_trace_ready=tensorboard_trace_handler(self.trace_dir, self._worker_name),
            )
            self._profiler.__enter__()
        else:  # Paused between the window's loops.
            self._profiler.toggle_collection_dynamic(True, self._activities)
        self._range = record_function(f"train_steps {step + 1}-{step + num_steps}")
        self._range.__enter__()

    def stop(self, step: int) -> str | None:
        """Ends the loop's range; at ``last_step`` writes the trace and returns its path."""
        if self._range is not None:
            self._range.__exit__(None, None, None)
            self._range = None
        if self._profiler is None:
            return None
        if step < self.last_step:
            # Checkpoints, summaries and evaluations between loops stay out of the trace.
            self._profiler.toggle_collection_dynamic(False, self._activities)
            return None
        if self._cuda:
            torch.cuda.synchronize()  # Once, at the window's end.
        before = set(os.listdir(self.trace_dir))
        self._profiler.__exit__(None, None, None)
        self._profiler = None
        written = sorted(set(os.listdir(self.trace_dir)) - before)
        path = os.path.join(self.trace_dir, written[-1]) if written else self.trace_dir
        _logger.info("profile of steps %d-%d written to %s", self.first_step, step, path)
        return path
