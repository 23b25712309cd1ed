"""The Controller's summary managers: the defaults it builds, writes, and resumes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torchgarden.summary import SummaryManager, SummaryManagerInterface
from torchgarden.utils.logs import Logs

__all__ = ["default_managers", "recorded_logs", "resume_managers", "write_summaries"]


def default_managers(
    *, training: bool, evaluating: bool, summary_dir: str | None, eval_summary_dir: str | None,
    summary_manager: SummaryManagerInterface | None,
    eval_summary_manager: SummaryManagerInterface | None, current_step: Callable[[], int],
) -> tuple[SummaryManagerInterface, SummaryManagerInterface | None]:
    """The train and eval managers: the ones given, else TensorBoard managers on the
    directories (the train manager is shared when both directories are the same)."""
    if training:
        train = summary_manager or SummaryManager(summary_dir, global_step=current_step)
    else:
        train = summary_manager or SummaryManager(None)
    if not evaluating:
        return train, None
    eval_summary_dir = eval_summary_dir or summary_dir
    if eval_summary_manager is not None:
        return train, eval_summary_manager
    if eval_summary_dir == summary_dir and training and summary_manager:
        return train, train
    return train, SummaryManager(eval_summary_dir, global_step=current_step)


def write_summaries(manager: SummaryManagerInterface, output: Logs, step: int) -> None:
    """Writes ``output`` at ``step`` and flushes."""
    # torchgarden's own managers take the step explicitly, so one built without a
    # global_step still writes at the right step; other implementations of the
    # interface get Orbit's call and read the step themselves.
    if isinstance(manager, SummaryManager):
        manager.write_summaries(output, step=step)
    else:
        manager.write_summaries(output)
    manager.flush()


def resume_managers(managers: list[Any], step: int) -> None:
    """``resume_at(step)`` on each distinct manager that has it: what an interrupted
    (or blown-up) run wrote past ``step`` is out of date."""
    for index, manager in enumerate(managers):
        resume = getattr(manager, "resume_at", None)
        if resume is not None and manager not in managers[:index]:
            resume(step)


def recorded_logs(manager: Any, step: int) -> Logs | None:
    """What ``manager`` recorded at ``step`` (its metrics file's row), or None."""
    recorded = getattr(manager, "recorded", None)
    return recorded(step) if recorded is not None else None
