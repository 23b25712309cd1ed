"""What the Controller shows while it runs: steps/sec and a tqdm progress bar."""

from __future__ import annotations

import time
from typing import Any

__all__ = ["ProgressBar", "StepTimer"]


class StepTimer:
    """Steps per second between two readings of the global step.

    Args:
        step: The global step when timing starts.
    """

    def __init__(self, step: int) -> None:
        self.start_step = step
        self.start_time = time.perf_counter()

    def steps_per_second(self, step: int, restart: bool = True) -> float:
        """Rate since the start (or the last restart); restarts the clock by default."""
        elapsed = time.perf_counter() - self.start_time
        value = (step - self.start_step) / elapsed if elapsed > 0 else 0.0
        if restart:
            self.start_step, self.start_time = step, time.perf_counter()
        return value


class ProgressBar:
    """A tqdm bar with ETA while training runs; a no-op object when disabled.

    Args:
        enabled: Show the bar (callers pass ``sys.stdout.isatty()`` by default).
    """

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._bar: Any = None

    @property
    def active(self) -> bool:
        """True while a bar is on screen (log lines must then go through it)."""
        return self._bar is not None

    def open(self, current: int, target: int) -> None:
        """Starts a bar from ``current`` to ``target`` steps (nothing if disabled or done)."""
        if not self.enabled or target <= current:
            return
        from tqdm.auto import tqdm  # Only runs with a terminal attached.

        self._bar = tqdm(total=target, initial=current, unit="step", dynamic_ncols=True,
                         leave=False)

    def write(self, message: str) -> None:
        """Prints ``message`` above the bar."""
        self._bar.write(message)

    def update(self, steps: int, loss: Any = None) -> None:
        """Advances by ``steps`` and shows ``loss`` (a float) after the bar."""
        if self._bar is None:
            return
        self._bar.update(steps)
        if isinstance(loss, float):
            self._bar.set_postfix(loss=f"{loss:.4g}", refresh=False)

    def close(self) -> None:
        """Removes the bar."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
