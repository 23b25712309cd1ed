"""One writer per directory: an OS file lock that dies with the process holding it.

A trainer holds ``<model_dir>/.torchgarden.lock`` from before its first write to its
end; an evaluator holds ``<model_dir>/eval/.torchgarden.lock`` the same way (it writes
only there). The lock is ``fcntl.flock`` on that file: the kernel drops it when the
holder exits for any reason, ``kill -9`` included, so a stale file never blocks. The
file records the holder's pid, host, start time and command, which a refused second
writer prints. The file is removed when the lock is released.

Example:
    >>> with RunLock("runs/ic", role="train") as lock:  # doctest: +SKIP
    ...     ...  # write checkpoints, summaries, params.yaml
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import json
import os
import shutil
import socket
import sys
import time
from typing import Any

__all__ = ["LOCK_FILE", "ModelDirLockedError", "RunLock"]

LOCK_FILE = ".torchgarden.lock"
#: Never through a symbolic link: the holder record would overwrite what it points at.
_FLAGS = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW


class ModelDirLockedError(RuntimeError):
    """Another live process writes the directory (the message names it)."""


class RunLock:
    """An exclusive lock on a run directory, taken before anything is written there.

    Args:
        directory: The directory to lock; created (and remembered as created) if missing.
        role: What the holder does there (``"train"``, ``"eval"``), shown to others.
    """

    def __init__(self, directory: str | os.PathLike[str], *, role: str = "train") -> None:
        self.directory = os.fspath(directory)
        self.role = role
        self.path = os.path.join(self.directory, LOCK_FILE)
        #: The directories this process created for the lock, outermost first.
        self.created: list[str] = []
        #: The directory's entries when the lock was taken (what this run did not create).
        self.preexisting: frozenset[str] = frozenset()
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None

    def acquire(self) -> RunLock:
        """Creates the directory if needed and takes the lock; returns self.

        Raises:
            ModelDirLockedError: Another live process holds the lock (named).
            OSError: The directory or the lock file cannot be created.
        """
        self.created = _make_dirs(self.directory)
        self.preexisting = frozenset(_listdir(self.directory)) - {LOCK_FILE}
        try:
            for _ in range(100):  # Retries only when a releasing holder removed the file.
                fd = os.open(self.path, _FLAGS, 0o644)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError as e:
                    holder = _holder_of(fd)
                    os.close(fd)
                    if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                        raise
                    raise ModelDirLockedError(self._refusal(holder)) from None
                if _same_file(fd, self.path):
                    self._fd = fd
                    self._write_holder()
                    return self
                os.close(fd)  # The file was unlinked by its last holder: lock the new one.
            raise ModelDirLockedError(f"could not take the lock {self.path}: it keeps changing.")
        except ModelDirLockedError:
            self._remove_created_dirs()
            raise
        except OSError as e:  # A full disk or a read-only filesystem: undo, name the file.
            if self._fd is not None:
                self.release()
            self._remove_created_dirs()
            raise OSError(e.errno, e.strerror, e.filename or self.path) from None

    def _write_holder(self) -> None:
        holder = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "role": self.role,
            "command": " ".join(sys.argv),
        }
        data = (json.dumps(holder) + "\n").encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)

    def _refusal(self, holder: dict[str, Any]) -> str:
        who = (
            f"pid {holder.get('pid', '?')} on host {holder.get('host', '?')} "
            f"({holder.get('role', 'train')}, since {holder.get('started', '?')})"
            if holder else "another process"
        )
        what = "model_dir" if self.role == "train" else "evaluation directory"
        return (
            f"{what} {self.directory} is in use: {who} holds {self.path}; only one "
            f"{self.role} job may write there at a time: wait for it to end, or use another "
            f"model_dir."
        )

    def release(self) -> None:
        """Removes the lock file (while still holding it) and drops the lock."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            if _same_file(fd, self.path):
                os.unlink(self.path)
        finally:
            os.close(fd)

    def remove_created(self, *, keep: tuple[str, ...] | None = ()) -> None:
        """Deletes what this process created: the entries that were not in the directory
        when the lock was taken (except those named in ``keep``; None keeps them all),
        then the lock, then the directory and its parents if this process made them and
        they are empty.

        It acts only while the lock is held, so no other writer's files are touched.
        """
        if not self.held:
            return
        for entry in _listdir(self.directory) if keep is not None else ():
            if entry in keep or entry == LOCK_FILE or entry in self.preexisting:
                continue
            path = os.path.join(self.directory, entry)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(path)
        self.release()
        self._remove_created_dirs()

    def _remove_created_dirs(self) -> None:
        for directory in reversed(self.created):
            try:
                os.rmdir(directory)  # Only if empty: a kept entry or a peer's file stays.
            except OSError:
                break
        self.created = []

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()


def _make_dirs(directory: str) -> list[str]:
    """``os.makedirs`` that returns the directories it created itself, outermost first."""
    missing = []
    path = os.path.abspath(directory)
    while not os.path.isdir(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    created = []
    for path in reversed(missing):
        try:
            os.mkdir(path)
        except FileExistsError:
            if not os.path.isdir(path):
                raise
            continue  # Made by someone else meanwhile: not ours to remove.
        created.append(path)
    return created


def _same_file(fd: int, path: str) -> bool:
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def _holder_of(fd: int) -> dict[str, Any]:
    """The holder's record; a holder that has just taken the lock writes it a moment later
    (two runs started together), so an empty file is read again for up to a second."""
    for _ in range(50):
        holder = _read_holder(fd)
        if holder:
            return holder
        time.sleep(0.02)
    return holder


def _read_holder(fd: int) -> dict[str, Any]:
    try:
        holder = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
    except (OSError, ValueError):
        return {}
    return holder if isinstance(holder, dict) else {}


def _listdir(directory: str) -> list[str]:
    try:
        return os.listdir(directory)
    except OSError:
        return []
