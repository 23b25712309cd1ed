"""What the Controller measures around each train loop: steps/s, the ETA, throughput, a
profile. ``LoopMonitor`` wraps each ``trainer.train(n)`` (``begin`` before it, ``end`` once
its logs are on the host) and holds the optional ``ThroughputMeter`` and ``ProfilerWindow``.

Every rate is the train loop's own: timed from the call of ``trainer.train(n)`` until its
logs reach the host (the loop's one sync, so the device has finished its work), reading
host clocks and counters only. Checkpoints, summaries and evaluations between loops are
left out of the rates and counted by the ETA, which runs on the wall clock.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function, tensorboard_trace_handler

from torchgarden.utils import startup

__all__ = [
    "PEAK_FLOPS_BF16", "LoopMonitor", "ProfilerWindow", "ThroughputMeter", "peak_flops_per_device",
]

_logger = logging.getLogger("torchgarden")

_GIB = float(2**30)

#: Dense bf16 peak FLOP/s of CUDA devices by name fragment (vendor data sheets); the
#: first fragment found in ``torch.cuda.get_device_name()`` wins.
PEAK_FLOPS_BF16: dict[str, float] = {
    "H100 PCIe": 756e12,
    "H100 NVL": 835e12,
    "H100": 989e12,
    "GH200": 989e12,
    "H200": 989e12,
    "B200": 2250e12,
    "A100": 312e12,
    "L40S": 362e12,
    "L4": 121e12,
    "A10G": 70e12,
    "V100": 125e12,
}

_SHOWN = (  # The throughput figures a train log line shows, in this order.
    ("throughput/examples_per_second", "examples/sec: {:.1f} | "),
    ("throughput/tokens_per_second", "tokens/sec: {:.0f} | "),
    ("throughput/mfu", "mfu: {:.1%} | "),
    ("throughput/data_wait_fraction", "data wait: {:.0%} | "),
)


def peak_flops_per_device(device: torch.device) -> float | None:
    """The bf16 data-sheet peak of a known CUDA device, else None (no MFU by default)."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in PEAK_FLOPS_BF16.items() if key in name), None)


def _peak_rss_gib() -> float | None:
    try:
        import resource
    except ImportError:  # Windows.
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / _GIB if sys.platform == "darwin" else peak * 1024 / _GIB  # bytes vs KiB


class ThroughputMeter:
    """Figures of one train loop at a time: ``loop_begin()``, then ``loop_end(steps, seconds)``
    once the loop's logs are on the host.

    Example:
        >>> meter = ThroughputMeter(examples_per_step=256, peak_flops=989e12,
        ...                         flops_per_example=6 * 124e6 * 1024)
        >>> meter.loop_begin()  # Then train 100 steps and read their logs on the host.
        >>> meter.loop_end(100, elapsed=20.0)["throughput/mfu"]  # 1280 examples/s.
        0.986...

    Args:
        examples_per_step: Examples one optimizer step consumes, all processes together
            (global batch size times gradient accumulation). 0 leaves out every rate but
            the data wait.
        tokens_per_example: Tokens in one example, for ``throughput/tokens_per_second``.
            None leaves it out.
        flops_per_example: Training FLOPs (forward and backward) of one example, or a
            zero-argument callable returning them (asked once, at the first loop end:
            e.g. a counter that needs a batch to have been seen). None: no MFU.
        peak_flops: Peak FLOP/s of all devices together. None: no MFU.
        data_wait: Zero-argument callable returning the seconds steps have waited for
            the input pipeline so far (``Trainer.data_wait_seconds``). None: left out.
        device: The training device; a CUDA device adds its peak allocated memory.
        data_counters: Zero-argument callable returning counts of the input pipeline
            (``Trainer.data_counters``: ``data/skipped_records``), logged as they are.
    """

    def __init__(
        self,
        *,
        examples_per_step: int = 0,
        tokens_per_example: int | None = None,
        flops_per_example: float | Callable[[], float | None] | None = None,
        peak_flops: float | None = None,
        data_wait: Callable[[], float] | None = None,
        device: torch.device | str | None = None,
        data_counters: Callable[[], dict[str, float]] | None = None,
    ) -> None:
        self.examples_per_step = int(examples_per_step)
        self._data_counters = data_counters
        self.tokens_per_example = tokens_per_example
        self._flops = flops_per_example
        self.peak_flops = peak_flops
        self._data_wait = data_wait
        device = torch.device(device) if device is not None else None
        self._cuda = device if device is not None and device.type == "cuda" else None
        self._wait_start = 0.0

    @property
    def flops_per_example(self) -> float | None:
        """Training FLOPs of one example, once known (a callable is resolved once)."""
        if callable(self._flops):
            self._flops = self._flops()
        return self._flops

    def loop_begin(self) -> None:
        """Reads the data-wait clock (call right before ``trainer.train``)."""
        self._wait_start = self._data_wait() if self._data_wait is not None else 0.0

    def loop_end(self, steps: int, elapsed: float) -> dict[str, float]:
        """The figures of a loop of ``steps`` steps that took ``elapsed`` seconds, each
        where it is known: ``throughput/{examples,tokens}_per_second``, ``throughput/mfu``
        (fraction of ``peak_flops``), ``throughput/data_wait_fraction``,
        ``memory/cuda_peak_gib`` (peak allocated during the loop) and
        ``memory/rss_peak_gib`` (the process' peak resident set)."""
        out: dict[str, float] = {}
        if elapsed > 0 and steps > 0:
            rate = steps * self.examples_per_step / elapsed
            if rate:  # 0 examples per step: no rates.
                out["throughput/examples_per_second"] = rate
                if self.tokens_per_example:
                    out["throughput/tokens_per_second"] = rate * self.tokens_per_example
                flops = self.flops_per_example
                if flops and self.peak_flops:
                    out["throughput/mfu"] = rate * flops / self.peak_flops
            if self._data_wait is not None:
                waited = self._data_wait() - self._wait_start
                out["throughput/data_wait_fraction"] = min(max(waited / elapsed, 0.0), 1.0)
        if self._data_counters is not None:
            out.update(self._data_counters())
        if self._cuda is not None:
            # Allocator counters on the host: no sync.
            out["memory/cuda_peak_gib"] = torch.cuda.max_memory_allocated(self._cuda) / _GIB
            torch.cuda.reset_peak_memory_stats(self._cuda)
        rss = _peak_rss_gib()
        if rss is not None:
            out["memory/rss_peak_gib"] = rss
        return out


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
            raise ValueError(f"profile steps must satisfy 1 <= first <= last, got "
                             f"[{first_step}, {last_step}].")
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
            with _kineto_quiet():
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


@contextlib.contextmanager
def _kineto_quiet() -> Iterator[None]:
    """Kineto (torch.profiler's backend) prints ``USDT: ... profiler_start``/``_stop`` to
    stderr at each window, which reads like a failure: its documented switch,
    ``KINETO_LOG_LEVEL``, read once when the first profiler starts, set above its highest
    level for that start only. A level the user set, or ``--verbose``, is kept."""
    if "KINETO_LOG_LEVEL" in os.environ or _logger.isEnabledFor(logging.DEBUG):
        yield
        return
    os.environ["KINETO_LOG_LEVEL"] = "6"  # Levels 0-5: verbose ... USDT.
    try:
        yield
    finally:
        os.environ.pop("KINETO_LOG_LEVEL", None)


def _duration(seconds: float) -> str:
    """``3723.4`` -> ``"1:02:03"``."""
    seconds = max(int(round(seconds)), 0)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class LoopMonitor:
    """Clocks and tools around train loops.

    Args:
        throughput: Adds ``throughput/*`` and ``memory/*`` figures; None: steps/sec only.
        profiler: Records the steps of its window; None: no profiling and no cost.
    """

    def __init__(
        self, throughput: ThroughputMeter | None = None, profiler: ProfilerWindow | None = None
    ) -> None:
        self.throughput = throughput
        self.profiler = profiler
        self._start = 0.0
        self._first: tuple[int, float] | None = None  # (step, time) the ETA counts from.
        self._first_wall = 0.0  # time.time() when the first loop began (start-up ends).
        self._reported_startup = False
        self._profiling = False

    def loop_length(self, step: int, length: int) -> int:
        """``length``, shortened so that a loop ends at each edge of the profiled window."""
        edge = self.profiler.steps_to_edge(step) if self.profiler is not None else None
        return length if edge is None else min(length, edge)

    def begin(self, step: int, num_steps: int) -> None:
        """Called right before ``trainer.train(num_steps)`` at global step ``step``."""
        if self._first is None:
            self._first, self._first_wall = (step, time.perf_counter()), time.time()
        self._profiling = self.profiler is not None and self.profiler.covers(step, num_steps)
        if self._profiling:
            self.profiler.start(step, num_steps)  # type: ignore[union-attr]
        if self.throughput is not None:
            self.throughput.loop_begin()
        self._start = time.perf_counter()

    def end(self, step: int, new_step: int, final_step: int | None) -> tuple[str, dict[str, float]]:
        """Called once the loop's logs are on the host; returns the log line's middle
        (``steps/sec: ... | examples/sec: ... | eta: ... | ``) and the figures for the
        summaries (``steps_per_second``, ``throughput/*``, ``memory/*``)."""
        now = time.perf_counter()
        elapsed = now - self._start
        figures = self.throughput.loop_end(new_step - step, elapsed) if self.throughput else {}
        if self._profiling:
            self.profiler.stop(new_step)  # type: ignore[union-attr]
        steps_per_sec = (new_step - step) / elapsed if elapsed > 0 else 0.0
        text = f"steps/sec: {steps_per_sec: 6.1f} | "
        text += "".join(shown.format(figures[key]) for key, shown in _SHOWN if key in figures)
        first_step, first_time = self._first or (new_step, now)
        if not self._reported_startup:  # Where the seconds before the first step went.
            figures.update(startup.report(self._first_wall, last=new_step == final_step))
            self._reported_startup = "startup/seconds" in figures
            if "startup/seconds" in figures:
                text += f"start-up: {figures['startup/seconds']:.1f} s | "
        if final_step and first_step < new_step < final_step and now > first_time:
            left = (final_step - new_step) * (now - first_time) / (new_step - first_step)
            text += f"eta: {_duration(left)} | "
        return text, {"steps_per_second": steps_per_sec, **figures}
