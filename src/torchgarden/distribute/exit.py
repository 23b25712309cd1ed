"""How a ``torchrun`` worker ends: flushed, then ``os._exit``."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import NoReturn

__all__ = ["exit_worker"]


def exit_worker(status: int = 0) -> NoReturn:
    """Ends this process with ``status`` once logging and stdio are flushed.

    Call it last in a script run under ``torchrun``, after checkpoints, summaries and
    trackers are closed and, if the script created it, the process group is destroyed.
    The interpreter's own exit frees the process groups that DDP, FSDP2 and DTensor's
    caches still hold, from gloo's threads, which then need the GIL of an interpreter
    being torn down: the worker aborts ("terminate called without an active exception")
    instead of exiting with its status, and ``torchrun`` reports the job failed (a few
    launches in a hundred on a busy machine; pytorch/pytorch#179291).
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # Closed or broken: nothing to save.
            stream.flush()
    os._exit(status)
