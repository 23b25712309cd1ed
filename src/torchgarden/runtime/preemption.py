"""Preemption: turn SIGTERM / SIGINT (or SLURM's SIGUSR1) into a checkpoint and a clean exit.

The first signal only sets a flag. The Trainer checks it between steps (a Python
attribute read, free) and ends its loop early; the Controller then saves a checkpoint,
logs where, and raises :class:`Preempted`, which the CLI turns into exit status 143 so
a scheduler can requeue the job. A second signal aborts at once.

Under torchrun the flag is all-reduced (MAX) across ranks at every loop boundary, so
all ranks stop at the same step; per-step agreement would cost a host sync per step.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Iterable
from types import FrameType
from typing import Any

from torchgarden.config.definitions import signal_named

__all__ = ["PreemptionWatcher", "Preempted", "parse_signals"]

_logger = logging.getLogger("torchgarden")


class Preempted(Exception):
    """Raised by the Controller after the preemption checkpoint is durable.

    Attributes:
        step: The global step the run stopped at.
        path: The checkpoint written (None if there is no checkpoint manager).
        exit_code: The status the CLI exits with (default 143 = 128 + SIGTERM).
    """

    def __init__(self, step: int, path: str | None, exit_code: int = 143) -> None:
        super().__init__(f"preempted at step {step}; checkpoint: {path or 'none'}")
        self.step = step
        self.path = path
        self.exit_code = exit_code


def parse_signals(names: Iterable[str]) -> list[signal.Signals]:
    """Maps names like ``"SIGTERM"`` / ``"USR1"`` to signals; unknown names raise ValueError."""
    found = []
    for name in names:
        sig = signal_named(name)
        if sig is None:
            raise ValueError(f"trainer.preemption_signals: unknown signal '{name}'; use e.g. "
                             "SIGTERM, SIGINT, SIGUSR1.")
        found.append(sig)
    return found


class PreemptionWatcher:
    """Installs signal handlers that request a checkpoint-and-exit at the next boundary.

    Args:
        signals: Signals to watch. Default SIGTERM and SIGINT.
        exit_code: Status for the CLI after the checkpoint. Default 143.

    Use as a context manager so the previous handlers are restored.
    """

    def __init__(
        self,
        signals: Iterable[signal.Signals] = (signal.SIGTERM, signal.SIGINT),
        exit_code: int = 143,
    ) -> None:
        self.signals = list(signals)
        self.exit_code = exit_code
        self.requested = False
        self.received: signal.Signals | None = None
        self._previous: dict[signal.Signals, Any] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        del frame
        if self.requested:
            # Second signal: give up on the checkpoint and stop now.
            _logger.warning("second %s: aborting without a checkpoint.", signal.Signals(signum).name)
            os._exit(128 + signum)
        self.requested = True
        self.received = signal.Signals(signum)
        _logger.warning(
            "received %s: saving a checkpoint at the next step boundary, then exiting "
            "(send it again to abort at once).", self.received.name,
        )

    def install(self) -> PreemptionWatcher:
        for sig in self.signals:
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def uninstall(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def __enter__(self) -> PreemptionWatcher:
        return self.install()

    def __exit__(self, *exc: Any) -> None:
        self.uninstall()

    def agreed(self) -> bool:
        """The flag OR-reduced over all ranks (one small all-reduce when distributed).

        Every rank gets the same answer. A signal that arrives while the all-reduce runs
        (the handler runs once it returns) is not in this answer; it stays set and is in
        the next one, at the next loop boundary.
        """
        from torchgarden.distribute import is_distributed, max_over_ranks

        if not is_distributed():
            return self.requested
        agreed = bool(max_over_ranks(int(self.requested)))  # Host sync: once per loop.
        self.requested = self.requested or agreed  # Never clears a flag just raised.
        return agreed
