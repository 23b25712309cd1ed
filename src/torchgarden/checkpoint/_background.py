"""What both checkpoint writers share: where they write, the background thread, the
failure message.

``CheckpointWriter`` (one ``state.pt``, rank 0) and ``DcpWriter`` (sharded, every rank)
differ in how a checkpoint reaches the disk, not in how an asynchronous write is
queued, awaited and reported.
"""

from __future__ import annotations

import datetime
import functools
import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from torchgarden.checkpoint.errors import CheckpointWriteError

__all__ = ["FORMAT_VERSION", "WriterBase", "manifest", "package_version"]

#: meta.json's format; a reader refuses a newer one.
FORMAT_VERSION = 1


@functools.lru_cache(maxsize=1)
def package_version() -> str:
    """The installed torchgarden version, or ``"unknown"``."""
    try:
        from importlib.metadata import version

        return version("torchgarden")
    except Exception:
        return "unknown"


def manifest(
    number: int, files: dict[str, Any], *, config: Any, extra: Any, version: str,
    **fields: Any,
) -> dict[str, Any]:
    """The meta.json of checkpoint ``number`` holding ``files`` (plus a format's own
    ``fields``, e.g. DCP's ``format`` and ``world_size``)."""
    return {
        "format_version": FORMAT_VERSION,
        **fields,
        "step": number,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "files": files,
        "config": config,
        "torchgarden": version,
        "extra": extra,
    }


class WriterBase:
    """Writes ``<directory>/<checkpoint_name>-<N>/`` directories for one manager.

    Args:
        directory: Where checkpoints are written (created on the first write).
        checkpoint_name: The directory-name prefix.
        on_written: Called with the path of each checkpoint once it is durable (on the
            writing thread), e.g. to apply retention.
        resume_from: Returns the checkpoint a rerun would resume from, or None; named in
            the message of a failed write.
        enable_async: Write on a background thread. Defaults to False.
        version: The torchgarden version recorded in meta.json. Defaults to the
            installed package version, or ``"unknown"``.
    """

    _THREAD_NAME = "ckpt-writer"

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
        self._pending: Future[Any] | None = None

    @property
    def version(self) -> str:
        """The version meta.json records."""
        return self._version if self._version is not None else package_version()

    def _later(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        """Runs ``function`` on the writer thread; :meth:`sync` waits for it."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1,
                                                thread_name_prefix=self._THREAD_NAME)
        self._pending = self._executor.submit(function, *args, **kwargs)

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

    def _write_error(self, number: int, reason: str, fix: str) -> CheckpointWriteError:
        """The one-line error of a failed write of checkpoint ``number``."""
        latest = self._resume_from()
        return CheckpointWriteError(
            f"could not write checkpoint {self._checkpoint_name}-{number} in "
            f"{self._directory!r}: {reason}; the checkpoints already there are intact: "
            f"{fix}, then rerun to resume from "
            f"{os.path.basename(latest) if latest else 'the start'}."
        )
