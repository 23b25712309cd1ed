"""``LoopMonitor``: what the Controller measures around each train loop.

Steps/sec, the throughput meter's figures, the ETA to the last step and the profiler
window, behind two calls: ``begin`` before ``trainer.train(n)`` and ``end`` once the
loop's logs are on the host. Every rate is the train loop's own: timed from the call of
``trainer.train(n)`` until its logs reach the host (the loop's one sync, so the device
has finished its work); checkpoints, summaries and evaluations between loops are left
out of the rates and counted by the ETA, which runs on the wall clock.
"""

from __future__ import annotations

import time

from torchgarden.loop.logs import format_throughput
from torchgarden.loop.profiler import ProfilerWindow
from torchgarden.loop.progress import EtaClock, format_duration
from torchgarden.loop.throughput import ThroughputMeter

__all__ = ["LoopMonitor"]


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
        self._eta: EtaClock | None = None
        self._profiling = False

    def loop_length(self, step: int, length: int) -> int:
        """``length``, shortened so that a loop ends at each edge of the profiled window."""
        if self.profiler is None:
            return length
        edge = self.profiler.steps_to_edge(step)
        return min(length, edge) if edge is not None else length

    def begin(self, step: int, num_steps: int) -> None:
        """Called right before ``trainer.train(num_steps)`` at global step ``step``."""
        if self._eta is None:
            self._eta = EtaClock(step)
        self._profiling = self.profiler is not None and self.profiler.covers(step, num_steps)
        if self._profiling:
            self.profiler.start(step, num_steps)  # type: ignore[union-attr]
        if self.throughput is not None:
            self.throughput.loop_begin()
        self._start = time.perf_counter()

    def end(self, step: int, new_step: int, final_step: int | None) -> tuple[str, dict[str, float]]:
        """Called once the loop's logs are on the host.

        Returns:
            The log line's middle (``steps/sec: ... | examples/sec: ... | eta: ... | ``)
            and the figures for the summaries (``steps_per_second``, ``throughput/*``,
            ``memory/*``).
        """
        elapsed = time.perf_counter() - self._start
        steps = new_step - step
        figures = self.throughput.loop_end(steps, elapsed) if self.throughput else {}
        if self._profiling:
            self.profiler.stop(new_step)  # type: ignore[union-attr]
        steps_per_sec = steps / elapsed if elapsed > 0 else 0.0
        left = self._eta.seconds_left(new_step, final_step) if final_step else None  # type: ignore[union-attr]
        eta = f"eta: {format_duration(left)} | " if left is not None else ""
        text = f"steps/sec: {steps_per_sec: 6.1f} | {format_throughput(figures)}{eta}"
        return text, {"steps_per_second": steps_per_sec, **figures}
