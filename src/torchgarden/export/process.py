"""``start_export``: ``torchgarden export`` in a background process (the export action).

Training goes on while a child process reads the (durable) best checkpoint and writes
the export; the child runs with one thread so it takes little from the trainer.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence

__all__ = ["PendingExport", "start_export"]


class PendingExport:
    """A running ``torchgarden export`` process.

    Args:
        process: The child process.
        stderr: The file its standard error goes to (read and removed by :meth:`wait`).
        output_dir: Where it writes.
    """

    def __init__(self, process: subprocess.Popen, stderr: str, output_dir: str) -> None:
        self.process = process
        self.output_dir = output_dir
        self._stderr = stderr

    def done(self) -> bool:
        """Whether the process has exited."""
        return self.process.poll() is not None

    def wait(self) -> str | None:
        """Waits for the process; returns None on success, else its last error line."""
        status = self.process.wait()
        try:
            with open(self._stderr, encoding="utf-8", errors="replace") as f:
                lines = [line.strip() for line in f if line.strip()]
        finally:
            os.remove(self._stderr)
        if status == 0:
            return None
        return lines[-1] if lines else f"torchgarden export exited with status {status}"


def start_export(model_dir: str, checkpoint_path: str, output_dir: str, *,
                 formats: Sequence[str] | None = None, threads: int = 1) -> PendingExport:
    """Starts ``python -m torchgarden export`` for one checkpoint and returns at once.

    Args:
        model_dir: The run's directory.
        checkpoint_path: The checkpoint to export (e.g. ``best_ckpt/best_ckpt-400``).
        output_dir: The export directory to create.
        formats: Formats to write. Defaults to None (all; ONNX skipped when missing).
        threads: Torch/OpenMP threads of the child. Defaults to 1.
    """
    command = [sys.executable, "-m", "torchgarden", "export", "--model_dir", model_dir,
               "--checkpoint", checkpoint_path, "--output", output_dir]
    if formats:
        command += ["--format", ",".join(formats)]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    handle, stderr = tempfile.mkstemp(prefix="torchgarden-export-", suffix=".log")
    with os.fdopen(handle, "w") as err:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err, env=env)
    return PendingExport(process, stderr, output_dir)
