"""What the Controller makes of loop outputs and shows on the console: host values, the
``output: ...`` part of its log lines, a progress bar and the first-loop (compile) notice."""

from __future__ import annotations

import pprint
import time
from typing import Any

import numpy as np
import torch

from torchgarden.utils import startup
from torchgarden.utils.logs import flatten

__all__ = ["FirstLoopNotice", "ProgressBar", "flatten_logs", "format_output", "to_host"]


def to_host(logs: Any) -> Any:
    """Returns ``logs`` with every tensor replaced by a float (0-d) or a NumPy array.

    All scalar tensors are copied to the host in one transfer per device, so a loop
    end costs one synchronisation however many metrics there are.
    """
    scalars: dict[torch.device, list[tuple[dict[str, Any], str, torch.Tensor]]] = {}

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            out: dict[str, Any] = {}
            for key, item in value.items():
                if isinstance(item, torch.Tensor) and item.numel() == 1 and item.ndim <= 1:
                    scalars.setdefault(item.device, []).append((out, key, item))
                    out[key] = None  # Filled in below; keeps the key order.
                else:
                    out[key] = walk(item)
            return out
        if isinstance(value, torch.Tensor):
            return value.detach().cpu().numpy()
        if isinstance(value, np.generic):
            return value.item()
        if isinstance(value, (list, tuple)):
            return type(value)(walk(v) for v in value)
        return value

    result = walk(logs)
    for entries in scalars.values():
        stacked = torch.stack([t.detach().reshape(()).double() for _, _, t in entries])
        for (out, key, _), value in zip(entries, stacked.tolist()):  # Host sync.
            out[key] = value
    return result


def flatten_logs(logs: dict[str, Any], prefix: str = "", sep: str = "/") -> dict[str, Any]:
    """Flattens nested dicts into ``{"a/b": value}`` (``utils.logs.flatten``)."""
    return flatten(logs, sep, prefix)


def _printable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _printable(v) for k, v in value.items()}
    shape = getattr(value, "shape", None)
    if shape is not None and len(shape) > 1:
        # Images and other arrays go to summaries; the log line names them only.
        return f"<{getattr(value, 'dtype', '')} array {'x'.join(map(str, shape))}>"
    return value


def format_output(logs: dict[str, Any]) -> str:
    """The ``output: ...`` part of an Orbit log line: arrays named by shape only."""
    text = pprint.pformat(_printable(logs), width=100, compact=True)
    if "\n" in text:
        return "\n" + "\n".join("    " + line for line in text.splitlines())
    return text


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
            # Message and newline in one write: processes sharing a stdout (tune workers)
            # then never start a line after another's unfinished one.
            print(message + "\n", end="", flush=True)

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
    """A callback that says the first train loop runs ``what`` besides training (e.g.
    ``torch.compile`` compiling), and how long the loops until it was done took, so a quiet
    minute is not taken for a hang. A compiled step whose graph is first called after an
    eager step compiles in the second loop: the notice waits for it."""

    def __init__(self, what: str = "torch.compile") -> None:
        self.what = what
        self._start: float | None = None
        self._loops = 0
        self._done = False

    def on_train_loop_begin(self, step: int) -> None:
        if self._start is None:
            self._start = time.perf_counter()
            print(f"torchgarden: step {step}: the first train loop runs {self.what} first "
                  "(once per process; can take a minute)...", flush=True)

    def on_train_loop_end(self, step: int, logs: Any = None) -> None:
        if self._start is None or self._done:
            return
        self._loops += 1
        if startup.pending():  # The compile is still to come (after an eager step).
            return
        self._done = True
        loops = "first train loop" if self._loops == 1 else f"first {self._loops} train loops"
        print(f"torchgarden: {loops} (with {self.what}) took "
              f"{time.perf_counter() - self._start:.1f} s.", flush=True)
