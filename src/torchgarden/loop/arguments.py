"""The Controller's argument checks: fail at construction, naming the argument."""

from __future__ import annotations

from typing import Any

__all__ = ["check_arguments"]


def check_arguments(
    trainer: Any, evaluator: Any, steps_per_loop: Any, summary_interval: int | None,
    global_step: Any,
) -> None:
    """Raises ``ValueError`` naming the first inconsistent ``Controller`` argument."""
    if trainer is None and evaluator is None:
        raise ValueError("Controller needs a `trainer` or an `evaluator` (got neither).")
    if trainer is not None and steps_per_loop is None:
        raise ValueError("`steps_per_loop` is required when a `trainer` is given.")
    if trainer is not None and not callable(steps_per_loop) and (
        not isinstance(steps_per_loop, int) or steps_per_loop < 1
    ):
        raise ValueError(
            f"`steps_per_loop` must be a positive int or a callable, got {steps_per_loop!r}."
        )
    if summary_interval is not None and summary_interval <= 0:
        raise ValueError(f"`summary_interval` must be positive, got {summary_interval}.")
    if summary_interval and isinstance(steps_per_loop, int) and summary_interval % steps_per_loop:
        k = steps_per_loop
        raise ValueError(
            f"`summary_interval` ({summary_interval}) must be a multiple of "
            f"`steps_per_loop` ({k}); set it to {k * max(1, summary_interval // k)}."
        )
    try:
        int(global_step)
    except TypeError:
        raise ValueError(
            "`global_step` must be an int-like counter shared with the trainer (e.g. "
            f"trainer.global_step), got {type(global_step).__name__}."
        ) from None
