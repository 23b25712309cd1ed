"""``CheckpointWriter``: puts numbered checkpoints on disk, inline or on a background thread.

The :class:`~torchgarden.checkpoint.CheckpointManager` decides *whether* a number is
saved and *which* checkpoints are kept; the writer does the write itself and turns a
full disk into a :class:`~torchgarden.checkpoint.CheckpointWriteError` that says what
is intact and how to resume.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from typing import Any

from torchgarden.checkpoint import _storage
from torchgarden.checkpoint._background import WriterBase
from torchgarden.checkpoint._host import HostStaging, to_host

__all__ = ["CheckpointWriter"]


class CheckpointWriter(WriterBase):
    """Writes ``<directory>/<checkpoint_name>-<N>/`` directories for one manager.

    With ``enable_async`` a write runs on one background thread; the next ``submit``,
    ``sync`` or ``close`` waits for it and re-raises its error.

    Args: as for :class:`~torchgarden.checkpoint._background.WriterBase`.
    """

    def __init__(self, directory: str, checkpoint_name: str, **kwargs: Any) -> None:
        super().__init__(directory, checkpoint_name, **kwargs)
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
        try:
            path = _storage.write_checkpoint(
                self._directory,
                self._checkpoint_name,
                number,
                state,
                config=config,
                extra=extra,
                version=self.version,
            )
        except (OSError, RuntimeError) as e:
            # torch.save reports a full disk as a RuntimeError of its zip writer.
            if isinstance(e, RuntimeError) and "inline_container" not in str(e):
                raise
            raise self._write_error(number, self._reason(e), "free space") from e
        self._on_written(path)
        return path

    def submit(
        self,
        number: int,
        state: dict[str, Any],
        *,
        config: dict[str, Any] | None,
        extra: dict[str, Any] | None,
        check: Callable[[], None] | None = None,
    ) -> None:
        """Starts :meth:`write` on the background thread after the previous write finished.

        ``check``, if given, runs on that thread first; what it raises stops the write
        and is re-raised by the next ``save``, ``sync`` or ``close``.
        """
        self.sync()

        def checked_write() -> None:
            if check is not None:
                check()
            self.write(number, state, config=config, extra=extra)

        self._later(checked_write)

    def _reason(self, error: BaseException) -> str:
        if isinstance(error, OSError) and error.strerror:
            reason = error.strerror
        else:
            reason = f"torch.save failed ({' '.join(str(error).split()) or type(error).__name__})"
        try:
            return f"{reason} ({shutil.disk_usage(self._directory).free / 2**20:.1f} MiB free there)"
        except OSError:
            return reason
