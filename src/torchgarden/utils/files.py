"""Atomic file writes: a reader sees the old file or the new one, never a torn one."""

from __future__ import annotations

import json
import os
import secrets
from typing import Any

__all__ = ["atomic_write_bytes", "atomic_write_json", "atomic_write_text", "fsync_dir"]


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Flushes a directory entry to disk (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # Some filesystems refuse fsync on directories; the rename is still atomic.
    finally:
        os.close(fd)


def temp_path_for(path: str | os.PathLike[str]) -> str:
    """A hidden, unique sibling of ``path`` for staging its new content."""
    path = os.fspath(path)
    directory, name = os.path.split(os.path.abspath(path))
    return os.path.join(directory, f".{name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Writes ``data`` to ``path`` through a synced temp file and ``os.replace``.

    The parent directory must exist. On any failure the temp file is removed and
    ``path`` keeps its old content.
    """
    temp = temp_path_for(path)
    try:
        with open(temp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException:
        if os.path.lexists(temp):
            os.remove(temp)
        raise
    fsync_dir(os.path.dirname(os.path.abspath(path)))


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Writes UTF-8 ``text`` to ``path`` atomically (see :func:`atomic_write_bytes`)."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike[str], payload: Any) -> None:
    """Writes ``payload`` as indented, key-sorted JSON to ``path`` atomically."""
    text = json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n"
    atomic_write_text(path, text)
