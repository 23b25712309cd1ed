"""What the Controller shows on the console besides its log lines: a progress bar and the
first-loop (compile) notice."""

from __future__ import annotations

import time
from typing import Any

__all__ = ["FirstLoopNotice", "ProgressBar"]


class ProgressBar:
    """A tqdm bar with ETA while training runs; does nothing unless ``enabled``."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._bar: Any = None

    def open(self, current: int, target: int) -> None:
        """Starts a bar from ``current`` to ``target`` steps (nothing if disabled or done)."""
        if not self.enabled or target <= current:
            return
        from tqdm.auto import tqdm  # Only runs with a terminal attached.

        self._bar = tqdm(total=target, initial=current, unit="step", dynamic_ncols=True,
                         leave=False)

    def write(self, message: str) -> None:
        """Prints ``message`` (above the bar while one is on screen)."""
        if self._bar is not None:
            self._bar.write(message)
        else:
            print(message, flush=True)

    def update(self, steps: int, loss: Any = None) -> None:
        """Advances by ``steps`` and shows ``loss`` (a float) after the bar."""
        if self._bar is None:
            return
        self._bar.update(steps)
        if isinstance(loss, float):
            self._bar.set_postfix(loss=f"{loss:.4g}", refresh=False)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


class FirstLoopNotice:
    """A callback that says the first train loop compiles (``torch.compile`` works on the
    first call), and how long that loop took, so a quiet minute is not taken for a hang.

    Args:
        what: What the first loop does besides training, e.g. ``"torch.compile"``.
    """

    def __init__(self, what: str = "torch.compile") -> None:
        self.what = what
        self._start: float | None = None
        self._done = False

    def on_train_loop_begin(self, step: int) -> None:
        if self._start is None:
            self._start = time.perf_counter()
            print(f"torchgarden: step {step}: the first train loop runs {self.what} first "
                  "(once per process; can take a minute)...", flush=True)

    def on_train_loop_end(self, step: int, logs: Any = None) -> None:
        if self._start is not None and not self._done:
            self._done = True
            print(f"torchgarden: first train loop (with {self.what}) took "
                  f"{time.perf_counter() - self._start:.1f} s.", flush=True)
