"""``ExportOnBest``: a fresh export next to each new best checkpoint (Orbit's export action).

Model Garden pairs ``NewBestMetric`` with ``ExportSavedModel`` in a ``ConditionalAction``;
here the ``BestCheckpointExporter`` already chooses the best checkpoint, so the callback
watches it. Training never waits for an export except where an async checkpoint save
would wait for the previous one: at the next evaluation (which may replace the checkpoint
being read) and at the end of the run.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from collections.abc import Callable
from typing import Any

from torchgarden.callbacks.base import Callback
from torchgarden.checkpoint import BestCheckpointExporter
from torchgarden.utils.logs import Logs

__all__ = ["ExportOnBest"]

_logger = logging.getLogger("torchgarden")
_EXPORT_NAME = re.compile(r"^export-(\d+)$")


class ExportOnBest(Callback):
    """Exports each new best checkpoint of ``best_exporter``.

    After an evaluation that made a new best, it starts an export of that checkpoint to
    ``<best dir>/export-<step>/`` and keeps the newest ``max_to_keep``. Without
    ``run_experiment`` (which calls ``on_experiment_end``), call :meth:`wait` at the end.

    Args:
        best_exporter: The trainer's best-checkpoint exporter.
        start: ``start(checkpoint_path, output_dir)`` begins an export and returns an
            object whose ``wait()`` returns None on success or an error message.
        max_to_keep: Exports kept in the best-checkpoint directory. Defaults to 5.
    """

    def __init__(self, *, best_exporter: BestCheckpointExporter,
                 start: Callable[[str, str], Any], max_to_keep: int = 5) -> None:
        super().__init__()
        if max_to_keep < 1:
            raise ValueError(f"ExportOnBest max_to_keep must be >= 1, got {max_to_keep}.")
        self.best_exporter = best_exporter
        self.start = start
        self.max_to_keep = max_to_keep
        self._pending: Any = None

    def exports(self) -> list[tuple[int, str]]:
        """``(step, path)`` of the export directories, oldest first."""
        directory = self.best_exporter.export_dir
        if not os.path.isdir(directory):
            return []
        found = [(int(m.group(1)), os.path.join(directory, m.group(0)))
                 for m in map(_EXPORT_NAME.match, os.listdir(directory)) if m]
        return sorted(found)

    def wait(self) -> None:
        """Waits for the running export (if any), logs its failure, applies retention."""
        if self._pending is None:
            return
        pending, self._pending = self._pending, None
        error = pending.wait()
        if error is not None:
            _logger.warning("export of the best checkpoint to %s failed: %s",
                            pending.output_dir, error)
        for _, path in self.exports()[:-self.max_to_keep]:
            shutil.rmtree(path, ignore_errors=True)

    def on_eval_begin(self, step: int) -> None:
        self.wait()  # The evaluation may replace the best checkpoint the export reads.

    def on_eval_end(self, step: int, logs: Logs) -> None:
        best = self.best_exporter.best_ckpt_logs or {}
        path = self.best_exporter.best_ckpt_path
        if best.get("best_ckpt_global_step") != step or path is None:
            return
        output_dir = os.path.join(self.best_exporter.export_dir, f"export-{step}")
        if os.path.exists(output_dir):
            return  # exported before a restart
        self.wait()
        self._pending = self.start(path, output_dir)

    def on_experiment_end(self, eval_logs: Logs) -> None:
        self.wait()
