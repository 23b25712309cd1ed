"""``CheckpointWriter``: puts numbered checkpoints on disk, inline or on a background thread.

The :class:`~torchgarden.checkpoint.CheckpointManager` decides *whether* a number is
saved and *which* checkpoints are kept; the writer does the write itself and turns a
full disk into a :class:`~torchgarden.checkpoint.CheckpointWriteError` that says what
is intact and how to resume.
"""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from torchgarden.checkpoint import _storage
from torchgarden.checkpoint._host import HostStaging, to_host
from torchgarden.checkpoint.errors import CheckpointWriteError

__all__ = ["CheckpointWriter"]


@functools.lru_cache(maxsize=1)
def _package_version() -> str:
    try:
        from importlib.metadata import version

        return version("torchgarden")
    except Exception:
        return "unknown"


class CheckpointWriter:
    """Writes ``<directory>/<checkpoint_name>-<N>/`` directories for one manager.

    With ``enable_async`` a write runs on one background thread; the next ``submit``,
    ``sync`` or ``close`` waits for it and re-raises its error.

    Args:
        directory: Where checkpoints are written (created on the first write).
        checkpoint_name: The directory-name prefix.
        on_written: Called with the path of each checkpoint once it is durable (on the
            writing thread), e.g. to apply retention.
        resume_from: Returns the checkpoint a rerun would resume from, or None; named in
            the message of a failed write.
        enable_async: Run writes on a background thread. Defaults to False.
        version: The torchgarden version recorded in meta.json. Defaults to the
            installed package version, or ``"unknown"``.
    """

    def __init__(
        self,
        directory: str,
        checkpoint_name: str,
        *,
        on_written: Callable[[str], None],
        resume_from: Callable[[], str | None],
        enable_async: bool = False,
        version: str | None = None,
    ) -> None:
        self._directory = directory
        self._checkpoint_name = checkpoint_name
        self._on_written = on_written
        self._resume_from = resume_from
        self._enable_async = enable_async
        self._version = version
        self._executor: ThreadPoolExecutor | None = None
        self._pending: Future[str] | None = None
        self._staging = HostStaging()

    def to_host(self, state: dict[str, Any]) -> dict[str, Any]:
        """``state`` on the host, ready for :meth:`write` or :meth:`submit`.

        With ``enable_async`` the tensors are copied (training goes on while the copy is
        written) into host buffers this writer reuses from save to save, after waiting
        for the pending write that still reads them.
        """
        if not self._enable_async:
            return to_host(state, copy=False)
        self.sync()
        return to_host(state, copy=True, staging=self._staging)

    def write(
        self,
        number: int,
        state: dict[str, Any],
        *,
        config: dict[str, Any] | None,
        extra: dict[str, Any] | None,
    ) -> str:
        """Writes ``state`` (already on the host) as checkpoint ``number``; returns its path.

        Raises:
            CheckpointWriteError: The disk is full or the write failed; nothing is left
                half-written and older checkpoints are untouched.
        """
        version = self._version if self._version is not None else _package_version()
        try:
            path = _storage.write_checkpoint(
                self._directory,
                self._checkpoint_name,
                number,
                state,
                config=config,
                extra=extra,
                version=version,
            )
        except (OSError, RuntimeError) as e:
            # torch.save reports a full disk as a RuntimeError of its zip writer.
            if isinstance(e, RuntimeError) and "inline_container" not in str(e):
                raise
            raise CheckpointWriteError(self._failure_message(number, e)) from e
        self._on_written(path)
        return path

    def submit(
        self,
        number: int,
        state: dict[str, Any],
        *,
        config: dict[str, Any] | None,
        extra: dict[str, Any] | None,
    ) -> None:
        """Starts :meth:`write` on the background thread after the previous write finished."""
        self.sync()
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ckpt-writer")
        self._pending = self._executor.submit(
            self.write, number, state, config=config, extra=extra
        )

    def sync(self) -> None:
        """Waits for the pending background write; re-raises its error, if any."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def close(self) -> None:
        """Waits for a pending write and stops the writer thread."""
        try:
            self.sync()
        finally:
            if self._executor is not None:
                self._executor.shutdown(wait=True)
                self._executor = None

    def _failure_message(self, number: int, error: BaseException) -> str:
        if isinstance(error, OSError) and error.strerror:
            reason = error.strerror
        else:
            reason = f"torch.save failed ({' '.join(str(error).split()) or type(error).__name__})"
        try:
            free = f" ({shutil.disk_usage(self._directory).free / 2**20:.1f} MiB free there)"
        except OSError:
            free = ""
        latest = self._resume_from()
        return (
            f"could not write checkpoint {self._checkpoint_name}-{number} in "
            f"{self._directory!r}: {reason}{free}; the checkpoints already there are intact: "
            f"free space, then rerun to resume from "
            f"{os.path.basename(latest) if latest else 'the start'}."
        )
