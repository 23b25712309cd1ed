"""``model_dir/metrics.jsonl``: every summary write as one JSON line, readable without TensorBoard.

One line per write of a summary manager::

    {"step": 100, "split": "train", "wall_time": 1731400000.1, "training_loss": 0.25,
     "learning_rate": 0.05, "throughput/examples_per_second": 3200.5}

Nested log dicts are flattened with ``/`` (``{"coco": {"AP": 0.3}}`` -> ``"coco/AP"``),
as TensorBoard shows them. Values are the Python floats the TensorBoard event holds in
float32: ``numpy.float32(row[key])`` equals what TensorBoard's reader returns. Non-finite
values are written as ``NaN`` / ``Infinity`` (Python's ``json`` reads them back).

A run that resumes at step N drops the lines past N first (``resume_at``), so after any
number of kills and restarts the file holds each ``(split, step)`` once, as an
uninterrupted run would have written it.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator, Mapping
from typing import IO, Any

from torchgarden.summary.tracker import Tracker
from torchgarden.utils.files import atomic_write_text

__all__ = ["METRICS_FILE", "MetricsFile", "read_metrics"]

_logger = logging.getLogger("torchgarden")

#: The file's name in a model_dir.
METRICS_FILE = "metrics.jsonl"
_RESERVED = ("step", "split", "wall_time")


def _rows(path: str) -> Iterator[tuple[str, dict[str, Any] | None]]:
    """``(line, row or None when the line is not a JSON object)`` of each line."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                row = json.loads(line)
            except ValueError:  # A line cut short by a kill, or garbage.
                row = None
            yield line, row if isinstance(row, dict) and "step" in row else None


def read_metrics(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The rows of a metrics file, in the order written; unreadable lines are skipped.

    Example:
        >>> rows = read_metrics("runs/ic/metrics.jsonl")
        >>> [r["training_loss"] for r in rows if r["split"] == "train"]
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        return []
    return [row for _, row in _rows(path) if row is not None]


class MetricsFile(Tracker):
    """Appends one JSON line per summary write to ``path`` (a :class:`Tracker`).

    Each line is flushed to the operating system as it is written, so a process killed
    with SIGKILL loses nothing it wrote before its last checkpoint.

    Args:
        path: The file, usually ``model_dir/metrics.jsonl``; its directory is created on
            the first write.
    """

    name = "metrics_file"

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._file: IO[str] | None = None
        self._resumed_at: int | None = None

    def log_scalars(self, split: str, step: int, scalars: Mapping[str, float]) -> None:
        """Appends ``{"step", "split", "wall_time", **scalars}`` as one line.

        Raises:
            ValueError: A scalar is named ``step``, ``split`` or ``wall_time``.
        """
        clash = [key for key in _RESERVED if key in scalars]
        if clash:
            raise ValueError(
                f"summary {clash[0]!r} clashes with a column of {self.path} "
                f"({', '.join(_RESERVED)}); rename the metric."
            )
        if self._file is None:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            # Never through a symbolic link (ELOOP): it would append to what it points at.
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW,
                         0o644)
            self._file = open(fd, "a", encoding="utf-8")  # noqa: SIM115 (kept open)
        row = {"step": int(step), "split": split, "wall_time": time.time(), **scalars}
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()  # To the OS: survives a SIGKILL of this process.

    def resume_at(self, step: int) -> None:
        """Drops the lines past ``step`` (and a torn last line) before the run goes on."""
        if self._resumed_at == step:
            return
        self.close()
        self._resumed_at = step
        if not os.path.exists(self.path):
            return
        kept, dropped = [], 0
        for line, row in _rows(self.path):
            if row is not None and int(row["step"]) <= step:
                kept.append(line if line.endswith("\n") else line + "\n")
            else:
                dropped += 1
        if dropped:
            atomic_write_text(self.path, "".join(kept))
            _logger.info("%s: dropped %d lines past step %d (resumed there).", self.path,
                         dropped, step)

    def read(self, split: str, step: int) -> dict[str, Any] | None:
        """The scalars of the last line written for ``(split, step)``, or None."""
        found = None
        for row in read_metrics(self.path):
            if row["split"] == split and int(row["step"]) == step:
                found = row
        if found is None:
            return None
        return {k: v for k, v in found.items() if k not in _RESERVED}

    def flush(self) -> None:
        """Nothing to do: every line is flushed as it is written."""

    def close(self) -> None:
        """Closes the file; a later write opens it again."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def __repr__(self) -> str:
        return f"MetricsFile({self.path!r})"
