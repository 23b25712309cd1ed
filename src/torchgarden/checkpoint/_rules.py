"""The manager's save rules and argument checks (Orbit / ``tf.train.CheckpointManager``)."""

from __future__ import annotations

import os

from torchgarden.checkpoint import dcp


def check_arguments(
    max_to_keep: int | None, checkpoint_interval: int | None, checkpoint_name: str,
    checkpoint_format: str,
) -> None:
    """Raises ``ValueError`` naming the first bad ``CheckpointManager`` argument."""
    if checkpoint_format not in ("single", dcp.FORMAT):
        raise ValueError(f"checkpoint_format must be 'single' or 'dcp', got {checkpoint_format!r}.")
    if max_to_keep is not None and (
        not isinstance(max_to_keep, int) or max_to_keep == 0 or max_to_keep < -1
    ):
        raise ValueError(
            f"max_to_keep must be a positive int or -1 (keep all), got {max_to_keep!r}."
        )
    if checkpoint_interval is not None and (
        not isinstance(checkpoint_interval, int) or checkpoint_interval < 1
    ):
        raise ValueError(
            f"checkpoint_interval must be a positive int or None (no interval checking), "
            f"got {checkpoint_interval!r}."
        )
    if not checkpoint_name or os.sep in checkpoint_name or checkpoint_name.startswith("."):
        raise ValueError(
            f"checkpoint_name must be a plain file name not starting with '.', "
            f"got {checkpoint_name!r}."
        )


def interval_reached(number: int, last_saved: int | None, interval: int) -> bool:
    """Whether ``number`` reached the next multiple of ``interval`` after ``last_saved``.

    Aligned intervals: saves land on 1000, 2000, ... even when loops end at other steps.
    Orbit instead saves on the first loop of a fresh start and then every ``interval``
    steps after whatever step that was.
    """
    return number // interval > (last_saved or 0) // interval
