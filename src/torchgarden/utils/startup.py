"""Where a process' seconds before its first training step went.

The parts are timed where they happen (``timed("data")`` around building the input
pipelines, ``"model"``, ``"restore"``; the compiled step adds ``"compile"``) and reported
once per process, by the first train loop (a compiled run: the first after its graph's
first call): ``startup/seconds`` is the time from the
process' start (Linux: its age from ``/proc``; elsewhere: since torchgarden was imported)
until that loop began, plus the compilation of its first call; ``startup/imports`` what
came before the run built anything (the interpreter, torchgarden, torch, the config);
``startup/other`` what no part names (docs/performance.md).

This module is torch-free.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from typing import Any

__all__ = ["add", "expect", "mark_imports", "pending", "report", "time_first_call", "timed"]

_IMPORTED = time.time()  # The fallback start: when torchgarden was first imported.
_PARTS: dict[str, float] = {}
_EXPECTED: set[str] = set()
_REPORTED = False


def _process_start() -> float:
    """The wall-clock time (epoch seconds) this process started, to ~10 ms on Linux."""
    try:
        with open("/proc/self/stat", "rb") as f:
            ticks = int(f.read().rpartition(b")")[2].split()[19])  # field 22: starttime
        with open("/proc/uptime", "rb") as f:
            uptime = float(f.read().split()[0])
        return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return _IMPORTED


def add(part: str, seconds: float) -> None:
    """Adds ``seconds`` to ``part`` (until the first train loop has reported)."""
    if not _REPORTED:
        _PARTS[part] = _PARTS.get(part, 0.0) + seconds


@contextlib.contextmanager
def timed(part: str) -> Iterator[None]:
    """Adds the block's wall-clock seconds to ``part``."""
    start = time.perf_counter()
    try:
        yield
    finally:
        add(part, time.perf_counter() - start)


def mark_imports() -> None:
    """Called once torch is imported and the run is about to build: the seconds since the
    process started are its ``imports`` (only the first run of a process has them)."""
    if not _REPORTED and "imports" not in _PARTS:
        _PARTS["imports"] = max(time.time() - _process_start(), 0.0)


def expect(part: str) -> None:
    """Holds the report back until ``part`` was timed (the compiled step's first graph
    call, which comes after the optimizer's first, eager, step)."""
    if not _REPORTED:
        _EXPECTED.add(part)


def pending() -> bool:
    """Whether an expected part (a compile) is still to come before the report."""
    return not _REPORTED and not _EXPECTED.issubset(_PARTS)


def time_first_call(module: Any, part: str = "compile") -> None:
    """Times ``module``'s first call as ``part`` (a ``torch.compile``d module compiles in
    it), by a pair of forward hooks removed after that call."""
    expect(part)
    began: list[float] = []

    def before(*_: Any) -> None:
        began.append(time.perf_counter())

    def after(*_: Any) -> None:
        add(part, time.perf_counter() - began[0])
        first.remove()
        last.remove()

    first = module.register_forward_pre_hook(before)
    last = module.register_forward_hook(after)


def report(loop_began: float, *, last: bool = False) -> dict[str, float]:
    """The ``startup/*`` figures, once per process, when every expected part was timed
    (or at the ``last`` loop); else ``{}``.

    Args:
        loop_began: ``time.time()`` when the first train loop began.
        last: This is the last loop of training: report what there is.
    """
    global _REPORTED
    if _REPORTED or not (last or _EXPECTED.issubset(_PARTS)):
        return {}
    _REPORTED = True
    before_loop = loop_began - _process_start() if "imports" in _PARTS else (
        sum(_PARTS.values()) - _PARTS.get("compile", 0.0))  # a later run: its parts only
    total = max(before_loop, 0.0) + _PARTS.get("compile", 0.0)
    figures = {"startup/seconds": total}
    figures.update({f"startup/{part}": seconds for part, seconds in sorted(_PARTS.items())})
    figures["startup/other"] = max(total - sum(_PARTS.values()), 0.0)
    return figures
