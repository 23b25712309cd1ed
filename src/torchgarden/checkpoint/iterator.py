"""``checkpoints_iterator``: follow a checkpoint directory as a trainer writes it."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator

from torchgarden.checkpoint import layout
from torchgarden.checkpoint.errors import CheckpointError

__all__ = ["checkpoints_iterator"]


def _is_complete(path: str) -> bool:
    try:
        return layout.problem(path) is None
    except CheckpointError:  # Written by a newer torchgarden.
        return False


def _wait_for_new(
    directory: str, name: str, last_number: int, deadline: float | None, poll_interval: float
) -> tuple[int, str] | None:
    while True:
        found = layout.list_checkpoints(directory, name)
        if found and found[-1][0] > last_number and _is_complete(found[-1][1]):
            return found[-1]
        if deadline is not None and time.monotonic() + poll_interval > deadline:
            return None
        time.sleep(poll_interval)


def checkpoints_iterator(
    directory: str | os.PathLike[str], *, timeout: float | None = None,
    timeout_fn: Callable[[], bool] | None = None, min_interval_secs: float = 0,
    poll_interval: float = 1.0, checkpoint_name: str = "ckpt",
) -> Iterator[str]:
    """Yields the path of each new complete checkpoint as it appears (``tf.train`` semantics).

    Only the newest checkpoint is yielded each time, so a slow consumer skips
    intermediate ones; a checkpoint is yielded once its directory has been
    renamed into place and its files have the sizes meta.json records, so a
    half-written checkpoint is never yielded.

    Args:
        directory: The checkpoint directory to follow.
        timeout: Seconds to wait for a new checkpoint before calling ``timeout_fn``;
            None waits forever. Defaults to None.
        timeout_fn: Called on timeout; returning True stops the iterator, False
            keeps waiting. Without it, a timeout stops the iterator. Defaults to None.
        min_interval_secs: The least seconds between two yields. Defaults to 0.
        poll_interval: Seconds between directory scans. Defaults to 1.0.
        checkpoint_name: The checkpoint name prefix. Defaults to ``"ckpt"``.

    Yields:
        Checkpoint directory paths, in increasing number.
    """
    directory = os.fspath(directory)
    last_number = -1
    while True:
        deadline = None if timeout is None else time.monotonic() + timeout
        found = _wait_for_new(directory, checkpoint_name, last_number, deadline, poll_interval)
        if found is None:
            if timeout_fn is not None and not timeout_fn():
                continue
            # The writer may have saved its last checkpoint just after the scan above and
            # then signalled the end: one more scan, so it is never missed.
            found = _wait_for_new(directory, checkpoint_name, last_number, 0.0, 0.0)
            if found is None:
                return
        started = time.monotonic()
        last_number = found[0]
        yield found[1]
        remaining = started + min_interval_secs - time.monotonic()
        if remaining > 0:
            time.sleep(remaining)
